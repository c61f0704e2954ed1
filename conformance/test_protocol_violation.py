"""A store that answers gs:// requests without object generations is named for what it is.

The real ``gs://`` backend, on fake-gcs-server, with the client's view of every object's
generation removed (as a store would that does not implement them): the suite does not say
"INCONCLUSIVE: the store refused a plain get" but FAIL, the store breaking the protocol
its backend relies on.
"""

from __future__ import annotations

import pytest

from gradientmail._errors import BackendError, ProtocolError
from gradientmail.conformance import SuiteOptions, Verdict, check_store
from tests.support.rigs import Rig


@pytest.fixture
def no_generations(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud.storage import Blob

    monkeypatch.setattr(Blob, "generation", property(lambda self: None))


@pytest.mark.emulator
def test_a_store_without_generations_fails_as_a_protocol_breach(
    rig_gcs: Rig, no_generations: None
) -> None:
    box = rig_gcs.fresh()
    with pytest.raises(ProtocolError) as raised:
        box.put("k", b"v")
    assert isinstance(raised.value, BackendError)
    assert "sent no generation" in str(raised.value)
    lines: list[str] = []
    report = check_store(box, SuiteOptions(quick=True), say=lines.append)
    verdict = report.verdict()
    assert report.verdict_kind is Verdict.FAIL
    assert report.exit_status == 1
    assert lines[0].startswith("FAIL  cannot test gs://"), lines
    assert "breaks the protocol its backend relies on" in lines[0]
    assert "refused a plain" not in "\n".join([*lines, verdict])
    assert verdict.startswith("verdict: FAIL: the store breaks the protocol"), verdict
    assert "NOT safe to coordinate on" in verdict
