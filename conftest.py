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
    pytest-xdist's ``worksteal`` hands the first worker the first slice of this list, so
    the slow runs go one after another on that worker while the others share the rest.
    That is on purpose: spreading them over every worker (tried) runs four CPU-heavy stress
    runs at once on two cores, and made the whole run slower (17 min 39 s against 11-15)
    and pushed the 40-run CLI test past its timeout.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
