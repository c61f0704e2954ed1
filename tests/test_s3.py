"""s3:// against moto_server and SeaweedFS: S3's own faults, races, configuration, secrets.

The contract itself (every operation, keys, listing, CAS) runs on S3 (moto) through the
``box`` fixture in test_contract.py, and lost responses and retry counts run on S3 (moto and
SeaweedFS) in test_cloud_faults.py; this file covers what is specific to the S3 backend.
Faults are injected at the HTTP layer by tests/faultproxy.py, through botocore's real
request path (its own retries are off).
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradientmail import Mailbox, from_url
from gradientmail.backends.s3 import WRITE_ID_METADATA
from gradientmail.conformance.races import RaceReport, cas_counter, race_put_if_absent
from gradientmail.errors import (
    AccessDeniedError,
    AtomicityViolationError,
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    GradientMailError,
    InvalidKeyError,
    KeyNotFoundError,
)
from gradientmail.mailbox import Capability
from tests.emulators import free_port
from tests.emulators.s3 import AWS_TEST_ENV, BUCKET, moto
from tests.faultproxy import FaultProxy, Predicate, match
from tests.rigs import Rig

pytestmark = pytest.mark.emulator

SECRETS = (AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"], AWS_TEST_ENV["AWS_ACCESS_KEY_ID"])


def _raw_client(endpoint: str) -> object:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint)


def _put(key: str, conditional: str | None = None) -> Predicate:
    """Matches the PutObject of ``key`` (optionally only with the given condition header)."""
    headers = {conditional: "."} if conditional else None
    return match(method="PUT", path=re.escape(f"/{key}") + r"(\?|$)", headers=headers)


def _assert_one_winner_per_key(report: RaceReport) -> None:
    assert report.errors == {}, report.counterexample()
    assert report.multiple_winners() == {}, report.counterexample()
    assert report.no_winner() == [], report.counterexample()
    assert report.wrong_bytes() == {}, report.counterexample()


# -- lost responses and retries, through the proxy -----------------------------------------------


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint) as running:
        yield running


@pytest.fixture
def proxied(rig_s3_moto: Rig, proxy: FaultProxy) -> Mailbox:
    """A fresh S3 mailbox whose every request goes through the fault proxy."""
    return from_url(rig_s3_moto.url(), endpoint_url=proxy.url)


def _key_path(box: Mailbox, key: str) -> str:
    return box.url.removeprefix("s3://") + "/" + key


# Lost responses, read-backs and retry counts shared with GCS and Azure run on S3 (moto and
# SeaweedFS) in test_cloud_faults.py; what follows is S3's own 409.


def test_conditional_request_conflict_409_is_retried_with_backoff(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    path = _key_path(proxied, "k")
    conflict = proxy.s3_conflict(_put(path, "If-None-Match"), times=2)
    assert proxied.put_if_absent("k", b"v") is True
    assert conflict.hits == 2
    assert proxy.count(_put(path)) == 3  # botocore retries nothing; our policy retries
    assert proxied.get("k") == b"v"


def test_conditional_request_conflict_on_a_swap_is_retried(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    proxied.put("k", b"1")
    _, version = proxied.get_versioned("k")
    proxy.s3_conflict(_put(_key_path(proxied, "k"), "If-Match"))
    new = proxied.put_if_match("k", b"2", version)
    assert new is not None
    assert proxied.get_versioned("k") == (b"2", new)


def test_conflicts_then_a_refusal_is_a_plain_loss_without_read_back(
    rig_s3_moto: Rig, proxied: Mailbox, proxy: FaultProxy
) -> None:
    # Racing creators on real S3 meet 409 ConditionalRequestConflict: the store did not carry
    # the request out, so the 412 that follows is a certain loss, not an unknown outcome.
    assert from_url(proxied.url, **(rig_s3_moto.options or {})).put_if_absent("k", b"theirs")
    path = _key_path(proxied, "k")
    proxy.s3_conflict(_put(path, "If-None-Match"), times=2)
    assert proxied.put_if_absent("k", b"mine") is False
    assert proxy.count(_put(path)) == 3
    assert proxy.count(match(method="HEAD")) == 0


# -- layout, versions, listing -------------------------------------------------------------------


def test_objects_carry_the_write_id_in_metadata_and_after_the_value(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    box = rig_s3_moto.fresh()
    assert box.put_if_absent("k", b"value")
    raw = _raw_client(moto_endpoint).get_object(  # type: ignore[attr-defined]
        Bucket=BUCKET, Key=box.url.removeprefix(f"s3://{BUCKET}/") + "/k"
    )
    write_id = raw["Metadata"][WRITE_ID_METADATA]
    assert re.fullmatch(r"[0-9a-f]{32}", write_id)
    assert raw["Body"].read() == b"value" + write_id.encode()
    assert box.get("k") == b"value"


def test_objects_written_by_other_tools_read_as_stored_and_odd_names_are_skipped(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    box = rig_s3_moto.fresh()
    prefix = box.url.removeprefix(f"s3://{BUCKET}/")
    client = _raw_client(moto_endpoint)
    for name, body in [("plain", b"raw"), ("dir/", b""), ("a//b", b"x"), ("./c", b"y")]:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=body)  # type: ignore[attr-defined]
    box.put("z", b"ours")
    assert list(box.list()) == ["plain", "z"]
    assert box.get("plain") == b"raw"
    _data, version = box.get_versioned("plain")
    assert box.put_if_match("plain", b"swapped", version) is not None
    assert box.get("plain") == b"swapped"


def test_keys_live_under_the_url_prefix_and_list_relative_to_it(rig_s3_moto: Rig) -> None:
    outer = rig_s3_moto.fresh()
    inner = from_url(outer.url + "/sub", **(rig_s3_moto.options or {}))
    inner.put("k", b"1")
    outer.put("sibling", b"2")
    assert list(outer.list()) == ["sibling", "sub/k"]
    assert list(inner.list()) == ["k"]
    assert outer.get("sub/k") == b"1"


def test_prefix_counts_toward_the_1024_byte_object_name_limit(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    box = rig_s3_moto.fresh()
    prefix = box.url.removeprefix(f"s3://{BUCKET}/") + "/"
    assert box.max_key_bytes == 1024 - len(prefix)
    longest = "k" * box.max_key_bytes
    assert box.put_if_absent(longest, b"v") is True
    listed = _raw_client(moto_endpoint).list_objects_v2(Bucket=BUCKET, Prefix=prefix)  # type: ignore[attr-defined]
    assert [len(o["Key"].encode()) for o in listed["Contents"]] == [1024]
    with pytest.raises(InvalidKeyError, match=f"at most {box.max_key_bytes} bytes"):
        box.put_if_absent(longest + "k", b"v")


def test_listing_streams_pages_lazily(rig_s3_moto: Rig, proxy: FaultProxy) -> None:
    box = from_url(rig_s3_moto.url(), endpoint_url=proxy.url)
    for i in range(3):
        box.put(f"k{i}", b"")
    listing = box.list()
    is_list = match(method="GET", path=r"list-type=2")
    assert proxy.count(is_list) == 0  # nothing is fetched before iteration starts
    assert next(listing) == "k0"
    assert proxy.count(is_list) == 1
    assert list(listing) == ["k1", "k2"]


def test_capabilities(rig_s3_moto: Rig) -> None:
    box = rig_s3_moto.fresh()
    assert box.capabilities == {
        Capability.ATOMIC_CREATE,
        Capability.COMPARE_AND_SWAP,
        Capability.SHARED_ACROSS_PROCESSES,
    }


# -- races ---------------------------------------------------------------------------------------
# SeaweedFS enforces conditional writes atomically. Losers of a contended key wait on a lock
# that retries about once a second, so these are sized to finish in about a minute together.


def test_threads_race_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    report = race_put_if_absent(rig_s3_seaweed.fresh(), racers=16, keys=16, mode="threads")
    _assert_one_winner_per_key(report)


def test_processes_race_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    report = race_put_if_absent(rig_s3_seaweed.fresh(), racers=4, keys=16, mode="processes")
    _assert_one_winner_per_key(report)


def test_cas_counter_with_threads_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    report = cas_counter(rig_s3_seaweed.fresh(), workers=6, increments=8, mode="threads")
    assert report.ok, report.counterexample()


def test_cas_counter_with_processes_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    report = cas_counter(rig_s3_seaweed.fresh(), workers=3, increments=5, mode="processes")
    assert report.ok, report.counterexample()


@pytest.fixture(scope="module")
def racy_moto(
    aws_test_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A moto_server that spills every value to a temporary file.

    moto checks ``If-None-Match`` and then stores, with no lock between; the file write in
    between releases the GIL, so concurrent creators reliably overlap in that window.
    """
    env = {"MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": "1"}
    with moto(tmp_path_factory.mktemp("racy-moto-log"), env=env) as endpoint:
        yield endpoint


@pytest.mark.xfail(
    strict=True,
    raises=AtomicityViolationError,
    reason="moto's conditional PutObject is check-then-store without a lock, so concurrent "
    "creators of one key can both win; if this passes, moto became atomic",
)
def test_moto_lets_two_racers_win_one_key(racy_moto: str) -> None:
    box = from_url(f"s3://{BUCKET}/moto-race-{uuid.uuid4().hex[:8]}", endpoint_url=racy_moto)
    # One key per round makes all 16 racers collide at once. About one round in seven
    # shows two winners here, so 80 rounds all passing by luck has odds below 1e-5.
    for round_number in range(80):
        report = race_put_if_absent(box, racers=16, keys=1, prefix=f"r{round_number}")
        assert report.errors == {}, report.counterexample()  # any other failure is real
        if report.multiple_winners():
            raise AtomicityViolationError(report.counterexample())
        _assert_one_winner_per_key(report)


# -- configuration and error mapping -------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://Upper/run", "not a valid S3 bucket name"),
        ("s3://ab/run", "not a valid S3 bucket name"),
        ("s3://bucket:9000/run", "endpoint_url"),
        ("s3://bucket/a//b", "prefix"),
        ("s3://bucket/a/../b", "prefix"),
    ],
)
def test_malformed_url_is_a_configuration_error(url: str, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(complaint)):
        from_url(url)


def test_credentials_in_the_url_are_refused_without_echoing_them() -> None:
    with pytest.raises(ConfigurationError) as info:
        from_url("s3://AKIDEXAMPLE:hunter2secret@bucket/run")
    assert "hunter2secret" not in str(info.value)
    assert "credential chain" in str(info.value)


def test_unknown_option_lists_the_accepted_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        from_url("s3://bucket/run", endpoint="http://127.0.0.1:1")
    assert "'endpoint'" in str(info.value)
    for accepted in ("endpoint_url", "profile", "region"):
        assert accepted in str(info.value)


@pytest.mark.parametrize(
    "endpoint", ["127.0.0.1:9000", "ftp://host", "http://user:pa55word@127.0.0.1:9000"]
)
def test_invalid_endpoint_is_a_configuration_error(endpoint: str) -> None:
    with pytest.raises(ConfigurationError, match="endpoint_url") as info:
        from_url("s3://bucket/run", endpoint_url=endpoint)
    assert "pa55word" not in str(info.value)


def test_unknown_profile_is_a_configuration_error(aws_test_env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="profile"):
        from_url("s3://bucket/run", profile=f"no-such-profile-{uuid.uuid4().hex[:6]}")


def test_options_work_as_url_query_parameters(rig_s3_moto: Rig, moto_endpoint: str) -> None:
    box = rig_s3_moto.fresh()
    box.put("k", b"v")
    same = from_url(f"{box.url}?endpoint_url={moto_endpoint}&region=us-east-1")
    assert same.get("k") == b"v"
    assert same.url == box.url


def test_aws_endpoint_url_is_honoured(
    rig_s3_moto: Rig, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = rig_s3_moto.fresh()
    box.put("k", b"v")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    via_env = from_url(box.url)
    assert via_env.get("k") == b"v"
    assert via_env.put_if_absent("k2", b"w") is True
    assert box.get("k2") == b"w"


def test_nonexistent_bucket_is_reported_by_every_operation(moto_endpoint: str) -> None:
    box = from_url("s3://no-such-bucket-gm/run", endpoint_url=moto_endpoint)
    for operation in (
        lambda: box.put_if_absent("k", b"v"),
        lambda: box.get("k"),
        lambda: list(box.list()),
        lambda: box.put("k", b"v"),
    ):
        with pytest.raises(BucketNotFoundError) as info:
            operation()
        message = str(info.value)
        assert "no-such-bucket-gm" in message
        assert "s3://no-such-bucket-gm/run" in message
        assert "create it" in message


def test_missing_key_in_an_existing_bucket_is_key_not_found(rig_s3_moto: Rig) -> None:
    with pytest.raises(KeyNotFoundError):
        rig_s3_moto.fresh().get("absent")


def test_nothing_listening_fails_fast_with_endpoint_unreachable(
    aws_test_env: dict[str, str],
) -> None:
    box = from_url("s3://bucket/run", endpoint_url=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(EndpointUnreachableError) as info:
        box.put_if_absent("k", b"v")
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"an unreachable endpoint took {elapsed:.1f} s to fail"
    assert "endpoint_url" in str(info.value)
    assert "127.0.0.1" in str(info.value)
    with pytest.raises(EndpointUnreachableError):
        box.get("k")
    with pytest.raises(EndpointUnreachableError):
        list(box.list())


def test_refused_credentials_are_access_denied_without_the_secret(
    seaweed_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SeaweedFS checks signatures; a profile with a wrong secret is refused.
    profile = f"wrong-{uuid.uuid4().hex[:6]}"
    wrong_secret = "wrong-secret-" + uuid.uuid4().hex
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[{profile}]\naws_access_key_id = {AWS_TEST_ENV['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {wrong_secret}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    box = from_url(f"s3://{BUCKET}/denied", endpoint_url=seaweed_endpoint, profile=profile)
    with pytest.raises(AccessDeniedError) as info:
        box.put_if_absent("k", b"v")
    assert isinstance(info.value, PermissionError)
    assert wrong_secret not in str(info.value)
    assert wrong_secret not in repr(box)
    assert "credentials" in str(info.value)


def test_missing_credentials_raise_access_denied_naming_the_fix(moto_endpoint: str) -> None:
    # A fresh interpreter, so that no cached session holds credentials.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
    )
    script = (
        "import gradientmail\n"
        f"box = gradientmail.from_url('s3://{BUCKET}/x', endpoint_url='{moto_endpoint}')\n"
        "try:\n"
        "    box.put_if_absent('k', b'v')\n"
        "except gradientmail.AccessDeniedError as exc:\n"
        "    print('denied:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("denied:"), done.stdout + done.stderr
    assert "AWS_ACCESS_KEY_ID" in done.stdout


def test_gradientmail_never_turns_on_botocore_debug_logs_which_hold_the_session_token(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    # A fresh interpreter whose application logs at INFO, as applications do: the session
    # token must not reach its logs, and the SDK's loggers must be left as they were.
    token = "gm-session-token-" + uuid.uuid4().hex
    script = (
        "import io, logging, gradientmail\n"
        "stream = io.StringIO()\n"
        "logging.basicConfig(level=logging.INFO, stream=stream)\n"
        f"box = gradientmail.from_url({rig_s3_moto.url()!r}, endpoint_url={moto_endpoint!r})\n"
        "box.put_if_absent('k', b'v'); box.get('k'); list(box.list())\n"
        "names = ('botocore', 'boto3', 'urllib3')\n"
        "loggers = [logging.getLogger(n) for n in names]\n"
        "print([x.level for x in loggers],"
        " [h for x in loggers for h in x.handlers if not isinstance(h, logging.NullHandler)])\n"
        f"print('at info:', {token!r} in stream.getvalue())\n"
        "logging.getLogger('botocore').setLevel(logging.DEBUG)\n"
        "box.put('k', b'w')\n"
        f"print('at debug:', {token!r} in stream.getvalue())\n"
    )
    env = {**os.environ, "AWS_SESSION_TOKEN": token}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[0, 0, 0] []",  # NOTSET, no handler added: gradientmail configured nothing
        "at info: False",
        "at debug: True",  # what the S3 docstring warns of: the check looked at real output
    ]


def test_credentials_never_appear_in_reprs_errors_or_pickles(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    box = rig_s3_moto.fresh()
    missing = from_url("s3://no-such-bucket-gm/run", endpoint_url=moto_endpoint)
    unreachable = from_url("s3://bucket/run", endpoint_url=f"http://127.0.0.1:{free_port()}")
    texts = [repr(box), str(box.url), pickle.dumps(box).decode("latin-1")]
    for failing in (lambda: missing.get("k"), lambda: unreachable.get("k")):
        with pytest.raises(GradientMailError) as info:
            failing()
        texts += [str(info.value), repr(info.value)]
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def test_pickled_mailbox_reopens_with_its_options(rig_s3_moto: Rig) -> None:
    box = rig_s3_moto.fresh()
    box.put_if_absent("k", b"v")
    clone = pickle.loads(pickle.dumps(box))
    assert (clone.url, repr(clone)) == (box.url, repr(box))
    assert clone.get("k") == b"v"
    assert clone.put_if_absent("k", b"other") is False


def test_closed_mailbox_reconnects_on_next_use(rig_s3_moto: Rig) -> None:
    box = rig_s3_moto.fresh()
    box.put("k", b"v")
    box.close()  # type: ignore[attr-defined]
    assert box.get("k") == b"v"


def test_many_threads_share_one_mailbox_without_pool_warnings(
    rig_s3_moto: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    import threading

    box = rig_s3_moto.fresh()
    barrier = threading.Barrier(32)
    results: list[bool] = []

    def claim(i: int) -> None:
        barrier.wait()
        results.append(box.put_if_absent(f"k{i}", b"v"))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 32
    assert "Connection pool is full" not in caplog.text
