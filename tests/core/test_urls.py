"""from_url, options, the scheme registry, plug-ins, missing extras, pickling and repr."""

from __future__ import annotations

import multiprocessing as mp
import os
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
from gradientmail import _urls as urls_module
from gradientmail.backends.memory import MemoryMailbox


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


# -- plain paths and file:// URLs ------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "exp%2F..%2F..%2Fescaped",
        "run%41",
        "a?b",
        "c#d",
        "q?fsync=false",
        "tab\there",
        "cr\rand\nlf",
        " spaced ",
        "café",
    ],
)
def test_a_plain_path_means_exactly_that_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    box = from_url(name)
    assert box.root == str(tmp_path / name)  # type: ignore[attr-defined]
    assert os.listdir(tmp_path) == [name]
    box.put("k", b"v")
    assert (tmp_path / name / "k.v").is_file()


def test_a_nul_in_a_path_or_file_url_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("a\x00b", f"{tmp_path}/a\x00b", f"file://{tmp_path}/a%00b"):
        with pytest.raises(ConfigurationError, match="NUL"):
            from_url(url)
    assert not any(tmp_path.iterdir())


def test_a_file_url_is_percent_decoded_exactly_once(tmp_path: Path) -> None:
    cases = {"run%2541": "run%41", "a%3Fb%23c": "a?b#c", "caf%C3%A9": "café", "sp%20ace": "sp ace"}
    for encoded, decoded in cases.items():
        box = from_url(f"file://{tmp_path}/{encoded}")
        assert box.root == str(tmp_path / decoded)  # type: ignore[attr-defined]
    assert sorted(os.listdir(tmp_path)) == sorted(cases.values())


@pytest.mark.parametrize("char", ["\t", "\r", "\n", "\x01", "\x7f"])
def test_control_characters_in_a_url_are_refused_not_dropped(tmp_path: Path, char: str) -> None:
    for url in (
        f"file://{tmp_path}/a{char}b",
        f"memory://a{char}b",
        f"file://{tmp_path}/x?fsync=f{char}alse",
    ):
        with pytest.raises(ConfigurationError, match="control character"):
            from_url(url)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("url", ["memory://[x", "s3://b]/p", "gs://[::1/p", "memory://a\u2100b"])
def test_urls_the_parser_cannot_split_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError, match="malformed"):
        from_url(url)


@pytest.mark.parametrize("url", [" s3://bucket/x", "1s3://bucket", "c:relative", "s3:bucket"])
def test_a_scheme_like_but_malformed_start_is_refused_not_taken_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="malformed mailbox URL"):
        from_url(url)
    assert not any(tmp_path.iterdir())


def _claim_in_child(box: Mailbox) -> tuple[bool, str]:
    return box.put_if_absent("claim", b"child"), box.root  # type: ignore[attr-defined]


def test_a_pickled_file_mailbox_reopens_the_same_directory_in_a_spawned_process(
    tmp_path: Path,
) -> None:
    names = ["run%41", "a?b", "c#d", "pct%2F..%2Fx", "tab\tand space", "caf%C3%A9", "raw\udcffbyte"]
    boxes = [from_url(str(tmp_path / name)) for name in names]
    for box in boxes:
        assert box.put_if_absent("claim", b"parent")
    with mp.get_context("spawn").Pool(1) as pool:
        results = pool.map(_claim_in_child, boxes)
    for box, (won, root) in zip(boxes, results, strict=True):
        assert (won, root) == (False, box.root)  # type: ignore[attr-defined]
    assert sorted(os.listdir(tmp_path)) == sorted(names)


@pytest.mark.parametrize(
    "url",
    [
        "file://alice:s3cr3t@/{tmp}/x",
        "file://alice:s3cr3t@localhost{tmp}/x",
        "file://s3cr3t@{tmp}/x",
    ],
)
def test_a_password_in_a_file_url_never_appears_in_errors(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        from_url(url.format(tmp=tmp_path))
    assert "s3cr3t" not in str(info.value)
    assert "alice" not in str(info.value)
    assert not any(tmp_path.iterdir())


def test_file_mailbox_url_and_repr_carry_no_user_info_host_or_query(tmp_path: Path) -> None:
    box = from_url(f"file://localhost{tmp_path}/x?fsync=false")
    assert box.url == f"file://{tmp_path}/x"
    assert repr(box) == f"<FileMailbox url='file://{tmp_path}/x'>"
    with pytest.raises(GradientMailError) as info:
        box.get("missing")
    assert "localhost" not in str(info.value)
    assert "fsync" not in str(info.value)


@pytest.mark.parametrize("name", ["run%41", "a b", "nœud", "x?y", "h#t", "100%"])
def test_a_memory_mailbox_reopens_the_same_store_from_its_url(name: str) -> None:
    from urllib.parse import quote

    box = from_url("memory://" + quote(name, safe=""))
    box.put("k", b"v")
    again = pickle.loads(pickle.dumps(box))
    assert again.get("k") == b"v"
    assert from_url(box.url).get("k") == b"v"


def test_a_password_in_a_memory_url_is_refused_and_never_echoed() -> None:
    with pytest.raises(ConfigurationError, match="no user name or password") as caught:
        from_url("memory://user:s3cret@store")
    assert "s3cret" not in str(caught.value)
