"""from_url, options, the scheme registry, plug-ins, missing extras, pickling and repr."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import gradientmail
from gradientmail import (
    ConfigurationError,
    GradientMailError,
    Mailbox,
    MissingDependencyError,
    from_url,
)
from gradientmail import urls as urls_module
from gradientmail.backends.memory import MemoryMailbox


def test_public_names_are_curated() -> None:
    assert sorted(gradientmail.__all__) == sorted(
        [
            "AccessDeniedError",
            "AtomicityViolationError",
            "BackendError",
            "BaseMailbox",
            "BucketNotFoundError",
            "Capability",
            "ConfigurationError",
            "EndpointUnreachableError",
            "GradientMailError",
            "InvalidDataError",
            "InvalidKeyError",
            "KeyNotFoundError",
            "Mailbox",
            "MissingDependencyError",
            "NotSupportedError",
            "OutcomeUnknownError",
            "Session",
            "SupportsCompareAndSwap",
            "TransientBackendError",
            "Version",
            "WorkerError",
            "__version__",
            "from_url",
        ]
    )
    for name in gradientmail.__all__:
        assert hasattr(gradientmail, name), name


def test_errors_inherit_the_matching_builtins() -> None:
    assert issubclass(gradientmail.KeyNotFoundError, LookupError)
    assert issubclass(gradientmail.InvalidKeyError, ValueError)
    assert issubclass(gradientmail.ConfigurationError, ValueError)
    assert issubclass(gradientmail.NotSupportedError, NotImplementedError)
    assert issubclass(gradientmail.MissingDependencyError, ImportError)
    assert issubclass(gradientmail.AccessDeniedError, PermissionError)
    assert issubclass(gradientmail.EndpointUnreachableError, ConnectionError)
    for name in gradientmail.__all__:
        obj = getattr(gradientmail, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, GradientMailError), name


def test_import_gradientmail_imports_no_sdk_and_no_torch() -> None:
    code = textwrap.dedent(
        """
        import sys, gradientmail
        box = gradientmail.from_url("memory://x")
        box.put_if_absent("k", b"v")
        heavy = [m for m in ("boto3", "botocore", "google.cloud.storage", "azure.storage.blob",
                             "torch", "numpy", "matplotlib", "hypothesis")
                 if m in sys.modules]
        print(",".join(heavy))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "non-empty"),
        ("nosuchscheme://x", "unknown mailbox URL scheme 'nosuchscheme'"),
        ("ftp://host/dir", "known schemes: .*file://.*memory://.*s3://"),
        ("memory://", "no store name"),
        ("memory://x#frag", "fragment"),
        ("memory://x?a=1&a=2", "given twice"),
        ("memory://x?colour=blue", "unknown option.*'colour'"),
        ("c:relative", "malformed mailbox URL"),
        ("file://server/share", "not host"),
    ],
)
def test_bad_urls_raise_configuration_error(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        from_url(url)
    assert isinstance(info.value, ValueError)


def test_unknown_option_lists_accepted_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="accepted options: fsync"):
        from_url(str(tmp_path), fsink=True)
    with pytest.raises(ConfigurationError, match="accepted options: none"):
        from_url("memory://x", fsync=True)
    assert not any(tmp_path.iterdir()), "a rejected option must not create anything"


def test_options_from_query_and_keywords_agree(tmp_path: Path) -> None:
    box = from_url(f"file://{tmp_path}?fsync=false")
    assert box.fsync is False  # type: ignore[attr-defined]
    assert from_url(f"file://{tmp_path}?fsync=false", fsync=False).fsync is False  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="both in the URL and as a keyword"):
        from_url(f"file://{tmp_path}?fsync=false", fsync=True)


def test_memory_handles_to_one_name_share_a_store() -> None:
    a = from_url("memory://shared-name")
    b = from_url("memory://shared-name")
    c = from_url("memory://other-name")
    assert a.put_if_absent("k", b"a")
    assert b.put_if_absent("k", b"b") is False
    assert c.put_if_absent("k", b"c") is True


def test_mailboxes_pickle(tmp_path: Path) -> None:
    for url in ("memory://pickled", str(tmp_path), f"file://{tmp_path}?fsync=false"):
        box = from_url(url)
        clone = pickle.loads(pickle.dumps(box))
        assert type(clone) is type(box)
        assert clone.url == box.url
        assert repr(clone) == repr(box)
    clone = pickle.loads(pickle.dumps(from_url(str(tmp_path), fsync=False)))
    assert clone.fsync is False  # type: ignore[attr-defined]


def _install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: str) -> None:
    dist = tmp_path / "fakeplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[gradientmail.backends]\n{lines}\n")
    (tmp_path / "fakeplugin.py").write_text(
        textwrap.dedent(
            """
            from gradientmail.backends.memory import MemoryMailbox

            def open_store(url, **options):
                name = url.split("://", 1)[1]
                box = MemoryMailbox("plugin-" + name)
                box.options_seen = options
                return box
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    urls_module._plugins.cache_clear()
    monkeypatch.setattr(urls_module, "_plugins", urls_module._plugins)


def test_third_party_scheme_through_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_plugin(tmp_path, monkeypatch, "mystore = fakeplugin:open_store")
    try:
        box = from_url("mystore://bucket?tier=hot", region="x")
        assert isinstance(box, Mailbox)
        assert box.put_if_absent("k", b"v")
        assert box.options_seen == {"tier": "hot", "region": "x"}  # type: ignore[attr-defined]
    finally:
        urls_module._plugins.cache_clear()


def test_plugin_cannot_shadow_a_builtin_scheme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_plugin(tmp_path, monkeypatch, "memory = fakeplugin:open_store")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            box = from_url("memory://builtin-wins")
        assert isinstance(box, MemoryMailbox)
        assert box.name == "builtin-wins"
        assert not hasattr(box, "options_seen")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ConfigurationError):
                from_url("unknownscheme://x")
        assert any("cannot be replaced" in str(w.message) for w in caught)
    finally:
        urls_module._plugins.cache_clear()


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("s3://bucket/prefix", "boto3", "s3"),
        ("gs://bucket/prefix", "google.cloud.storage", "gcs"),
        ("az://container/prefix", "azure.storage.blob", "azure"),
    ],
)
def test_missing_extra_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(MissingDependencyError) as info:
        from_url(url)
    assert f"pip install 'gradientmail[{extra}]'" in str(info.value)
    assert isinstance(info.value, ImportError)


def test_require_names_the_extra() -> None:
    with pytest.raises(MissingDependencyError, match=r"gradientmail\[s3\]"):
        urls_module.require("gradientmail_no_such_module", "s3")
