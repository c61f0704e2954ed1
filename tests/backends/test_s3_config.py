"""s3:// configuration: URLs, options (those S3-compatible stores need too), credentials.

What a user configures, and how each mistake is reported: malformed URLs, unknown or
invalid options, endpoints, profiles, missing buckets and credentials; the options for
S3-compatible stores (addressing style, signature version, connection pool, a boto3
Session or botocore Config passed from Python); what a pickle carries. Semantics, faults
and races are in test_s3.py.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from gradientmail import from_url
from gradientmail._errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    GradientMailError,
    KeyNotFoundError,
)
from tests.support.connections import counting_connections
from tests.support.emulators import free_port
from tests.support.emulators.s3 import AWS_TEST_ENV, BUCKET
from tests.support.faultproxy import FaultProxy, match
from tests.support.rigs import Rig

pytestmark = pytest.mark.emulator

SECRETS = (AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"], AWS_TEST_ENV["AWS_ACCESS_KEY_ID"])


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


@pytest.mark.timeout(60)  # a hang; failing fast is counted in attempts below
def test_nothing_listening_fails_fast_with_endpoint_unreachable(
    aws_test_env: dict[str, str],
) -> None:
    port = free_port()
    box = from_url("s3://bucket/run", endpoint_url=f"http://127.0.0.1:{port}")
    with counting_connections(port) as seen, pytest.raises(EndpointUnreachableError) as info:
        box.put_if_absent("k", b"v")
    # Fast: one attempt per retry the policy allows (botocore's own retries are off), and
    # no read-back, as nothing was sent.
    assert seen.attempts == box.retry_policy.attempts
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


# -- options for S3-compatible stores ------------------------------------------------------------


class _Sent(Exception):
    """Raised by a request hook once it has seen the request: nothing goes on the wire."""


def _first_request(box_options: dict[str, Any], url: str = f"s3://{BUCKET}/run") -> Any:
    """The first request a mailbox opened with these options would send (a PutObject)."""
    import boto3

    session = boto3.session.Session()
    seen: list[Any] = []

    def hook(request: Any, **_: Any) -> None:
        seen.append(request)
        raise _Sent

    session.events.register("before-send.s3", hook)
    box = from_url(url, session=session, **box_options)
    with pytest.raises(_Sent):
        box.put_if_absent("k", b"v")
    return seen[0]


@pytest.mark.parametrize(
    ("options", "address"),
    [
        ({"endpoint_url": "http://store.example:9000"}, "http://store.example:9000/gm-tests/run/k"),
        (
            {"endpoint_url": "http://store.example:9000", "addressing_style": "virtual"},
            "http://gm-tests.store.example:9000/run/k",
        ),
        ({"region": "us-east-1"}, "https://gm-tests.s3.amazonaws.com/run/k"),
        (
            {"region": "us-east-1", "addressing_style": "path"},
            "https://s3.amazonaws.com/gm-tests/run/k",
        ),
    ],
)
def test_addressing_style_decides_where_the_bucket_goes(
    aws_test_env: dict[str, str], options: dict[str, Any], address: str
) -> None:
    assert _first_request(options).url == address


def test_options_for_s3_compatible_stores_work_as_url_query_parameters(
    aws_test_env: dict[str, str],
) -> None:
    query = "addressing_style=virtual&signature_version=s3&endpoint_url=http://store.example:9000"
    request = _first_request({}, f"s3://{BUCKET}/run?{query}")
    assert request.url == "http://gm-tests.store.example:9000/run/k"
    assert request.headers["Authorization"].startswith(b"AWS ")  # SigV2


@pytest.mark.parametrize(("version", "scheme"), [("s3v4", b"AWS4-HMAC-SHA256 "), ("s3", b"AWS ")])
def test_signature_version_decides_how_requests_are_signed(
    seaweed_endpoint: str, version: str, scheme: bytes
) -> None:
    # SeaweedFS checks every signature: a round trip proves the store accepted it.
    with FaultProxy(seaweed_endpoint) as proxy:
        box = from_url(
            f"s3://{BUCKET}/sig-{uuid.uuid4().hex[:8]}",
            endpoint_url=proxy.url,
            signature_version=version,
            addressing_style="path",
        )
        assert box.put_if_absent("k", b"v")
        assert box.get("k") == b"v"
        signed = {r.headers["authorization"].encode()[: len(scheme)] for r in proxy.requests}
    assert signed == {scheme}
    assert (
        _first_request({"signature_version": version}).headers["Authorization"].startswith(scheme)
    )


def test_max_pool_connections_sizes_the_connection_pool(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    default = rig_s3_moto.fresh()
    small = from_url(f"{rig_s3_moto.url()}?max_pool_connections=3", endpoint_url=moto_endpoint)
    assert default._client().meta.config.max_pool_connections == 64  # type: ignore[attr-defined]
    assert small._client().meta.config.max_pool_connections == 3  # type: ignore[attr-defined]
    small.put("k", b"v")
    assert small.get("k") == b"v"


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"max_pool_connections": 0}, "at least 1"),
        ({"max_pool_connections": "many"}, "at least 1"),
        ({"max_pool_connections": True}, "at least 1"),
        ({"addressing_style": "dns"}, "auto, virtual, path"),
        ({"signature_version": "v2"}, "s3v4, s3"),
        ({"session": "default"}, "cannot be given in the URL"),
        ({"session": object()}, "expected a boto3.session.Session"),
        ({"config": {"connect_timeout": 1}}, "expected a botocore.config.Config"),
    ],
)
def test_invalid_s3_compatible_options_are_configuration_errors(
    options: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(complaint)):
        from_url(f"s3://{BUCKET}/run", **options)


def test_python_objects_are_refused_in_the_url_query() -> None:
    for name in ("session", "config"):
        with pytest.raises(ConfigurationError, match="keyword argument"):
            from_url(f"s3://{BUCKET}/run?{name}=x")


def test_a_session_is_not_given_with_a_profile(aws_test_env: dict[str, str]) -> None:
    import boto3

    with pytest.raises(ConfigurationError, match="either the session option or the profile"):
        from_url(f"s3://{BUCKET}/run", session=boto3.session.Session(), profile="other")


def test_a_config_is_merged_but_never_turns_botocore_retries_on(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    from botocore.config import Config

    theirs = Config(
        connect_timeout=7,
        read_timeout=8,
        retries={"mode": "standard", "max_attempts": 10},
        s3={"us_east_1_regional_endpoint": "regional"},
    )
    with FaultProxy(moto_endpoint) as proxy:
        box = from_url(
            rig_s3_moto.url(),
            endpoint_url=proxy.url,
            config=theirs,
            read_timeout=9,
            addressing_style="path",
        )
        merged = box._client().meta.config  # type: ignore[attr-defined]
        assert (merged.connect_timeout, merged.read_timeout) == (7, 9)  # named options win
        assert merged.s3 == {"us_east_1_regional_endpoint": "regional", "addressing_style": "path"}
        assert merged.max_pool_connections == 64
        # Each attempt of the shared retry policy is one request: botocore retried nothing.
        proxy.fail(match(method="PUT"), status=503, times=2)
        assert box.put_if_absent("k", b"v")
        assert proxy.count(match(method="PUT")) == 3


def test_a_session_makes_the_client_and_is_left_out_of_pickles(
    seaweed_endpoint: str, aws_test_env: dict[str, str]
) -> None:
    import boto3
    from botocore.config import Config

    wrong_secret = "wrong-secret-" + uuid.uuid4().hex
    session = boto3.session.Session(
        aws_access_key_id=aws_test_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=wrong_secret,
        region_name="us-east-1",
    )
    url = f"s3://{BUCKET}/session-{uuid.uuid4().hex[:8]}"
    box = from_url(url, endpoint_url=seaweed_endpoint, session=session, config=Config())
    with pytest.raises(AccessDeniedError):  # SeaweedFS checked the session's credentials
        box.put_if_absent("k", b"v")
    data = pickle.dumps(box)
    assert wrong_secret.encode() not in data
    clone = pickle.loads(data)
    # The copy opens its client from the standard chain (here the environment's).
    assert clone.put_if_absent("k", b"v") is True
    assert clone.url == box.url
    right = boto3.session.Session(region_name="us-east-1")
    assert from_url(url, endpoint_url=seaweed_endpoint, session=right).get("k") == b"v"
