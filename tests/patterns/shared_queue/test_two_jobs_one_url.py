"""Two jobs with different unit sets started together on one URL: the job refused names the
real difference from the run's own identifier list, never its own list or "None"."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail._errors import RunMismatchError
from gradientmail.patterns._run_layout import MANIFEST_UNITS_KEY, check_manifest, digest_of
from tests.support.delegating import Delegating


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the mechanism is gradientmail's own, above the
    Mailbox interface (see ``tests.support.rigs.local_rig``)."""
    return local_box


class OtherJobBetweenListAndManifest(Delegating):
    """Job B's handle: right after B stores its identifier list, job A starts and wins."""

    def __init__(self, inner: Mailbox, job_a: list[str]) -> None:
        super().__init__(inner)
        self.job_a = job_a
        self.done = False

    def put_if_absent(self, key: str, data: Any) -> bool:
        won = self.inner.put_if_absent(key, data)
        if key.startswith(MANIFEST_UNITS_KEY) and not self.done:
            self.done = True
            assert check_manifest(self.inner, self.job_a) is True  # A created the run
        return bool(won)


def test_the_refused_job_names_the_first_difference_from_the_run(box: Mailbox) -> None:
    job_a = [f"a{i:02d}" for i in range(5)]
    job_b = [f"a{i:02d}" for i in range(4)] + ["b99"]
    with pytest.raises(RunMismatchError) as refused:
        check_manifest(OtherJobBetweenListAndManifest(box, job_a), job_b)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "first difference: 'b99' here, 'a04' in the run" in message, message
    # The run's list is A's; B's was removed when B lost the manifest.
    assert list(box.list(MANIFEST_UNITS_KEY + "/")) == [f"{MANIFEST_UNITS_KEY}/{digest_of(job_a)}"]
    # Every later refusal says the same, from the run's list.
    with pytest.raises(RunMismatchError, match="'b99' here, 'a04' in the run"):
        check_manifest(box, job_b)


def test_jobs_racing_in_threads_all_agree_on_one_run(box: Mailbox) -> None:
    jobs = [[f"j{n}-{i}" for i in range(3)] for n in range(6)]
    results: dict[int, Any] = {}
    start = threading.Barrier(len(jobs))

    def run(n: int) -> None:
        start.wait()
        try:
            results[n] = check_manifest(box, jobs[n])
        except RunMismatchError as exc:
            results[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    (winner,) = [n for n, r in results.items() if r is True]
    for n, result in results.items():
        if n != winner:
            assert isinstance(result, RunMismatchError)
            assert "None" not in str(result)
            assert f"{jobs[winner][0]!r} in the run" in str(result)
    assert len(list(box.list(MANIFEST_UNITS_KEY + "/"))) == 1
