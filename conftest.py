"""Root pytest configuration: loads the backend rigs shared by tests/ and conformance/."""

import pytest

pytest_plugins = [
    "tests.support.rigs",
    "tests.support.emulators.s3",
    "tests.support.emulators.gcs",
    "tests.support.emulators.azure",
]


#: Workers that run the stress runs marked ``slow``, one after another each.
SLOW_CHAINS = 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the stress runs marked ``slow`` first, on two workers, one after another each.

    ``make test`` runs pytest-xdist's ``worksteal`` scheduler, which first hands worker *i*
    the *i*-th of equal consecutive slices of this list, and later moves tests from the
    end of a busy worker's queue to an idle one. The slow runs lead the first two slices,
    alternately, the longest first (``conformance/`` sorts first): started last, a long run
    would finish alone while the others sat idle. One chain was the critical path (16 min
    on a loaded machine); spread over all four workers, four CPU-heavy runs at once on two
    cores were slower still (17 min 39 s). Without workers, the slow runs simply go first.
    """
    slow = sorted(
        (item for item in items if item.get_closest_marker("slow") is not None),
        key=lambda item: item.nodeid,
    )
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    chains = min(SLOW_CHAINS, workers)
    if chains < 2:
        items[:] = slow + fast
        return
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for share in range(workers):
        size = remaining // (workers - share)  # the slice worksteal sends this worker
        remaining -= size
        mine = slow[share::chains] if share < chains else []
        take = max(0, size - len(mine))
        ordered += mine + fast[:take]
        del fast[:take]
    items[:] = ordered + fast  # fast is empty unless a slice held more slow runs than room
