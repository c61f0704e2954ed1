"""Root pytest configuration: loads the backend rigs shared by tests/ and conformance/."""

import pytest

pytest_plugins = [
    "tests.support.rigs",
    "tests.support.emulators.s3",
    "tests.support.emulators.gcs",
    "tests.support.emulators.azure",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the stress runs marked ``slow`` first, keeping the order otherwise.

    Under ``make test``'s worker processes, a long run started last would finish alone
    while the other workers sit idle; started first, it overlaps the many short tests.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
