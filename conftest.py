"""Root pytest configuration: loads the backend rigs shared by tests/ and conformance/."""

import pytest

pytest_plugins = [
    "tests.support.rigs",
    "tests.support.emulators.s3",
    "tests.support.emulators.gcs",
    "tests.support.emulators.azure",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each worker process its share of the stress runs marked ``slow``, first.

    ``make test`` runs pytest-xdist's ``worksteal`` scheduler, which first hands worker *i*
    the *i*-th of equal consecutive slices of this list, and later moves tests from the
    end of a busy worker's queue to an idle one. So the list is built as those slices, each
    starting with every *n*-th slow run: no worker is left with the long runs alone at the
    end, and none queues them all. In one process (no workers) the slow runs simply go first.
    """
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for share in range(workers):
        size = remaining // (workers - share)  # the slice worksteal sends this worker
        remaining -= size
        mine = slow[share::workers]
        take = max(0, size - len(mine))
        ordered += mine + fast[:take]
        del fast[:take]
    items[:] = ordered + fast  # fast is empty unless a share held more slow runs than room
