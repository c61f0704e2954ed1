"""The built distribution: what `pip install gradientmail` gives a user.

The sdist and the wheel are built once per session with ``python -m build``, isolated as for a
release (the wheel is built from the sdist, so a file missing from the sdist fails here). The
tests then read the wheel's metadata and contents, run ``twine check``, and install the wheel
alone into a fresh venv that has nothing else, where the command line must work.
"""

from __future__ import annotations

import email
import email.message
import importlib.util
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "gradientmail"
#: The extras users install beside their own torch and SDKs, and what each must bring.
USER_EXTRAS = {
    "s3": {"boto3"},
    "gcs": {"google-cloud-storage"},
    "azure": {"azure-storage-blob"},
    "torch": {"torch"},
    "plot": {"matplotlib"},
    "conformance": {"hypothesis"},
}
#: Floors, and exclusions of a single broken release; never a pin or an upper bound.
ALLOWED_OPERATORS = {">=", "!="}
BUILD_TIMEOUT = 240  # seconds; a build takes about 15 s on a loaded 2-core machine


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path
    metadata: email.message.Message

    @property
    def version(self) -> str:
        return str(self.metadata["Version"])


def run(
    args: list[str | Path], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; callers check its exit status with `explain` in view."""
    command = [str(a) for a in args]
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT
    )


def explain(result: subprocess.CompletedProcess[str]) -> str:
    """The exit status and the end of both outputs, for an assertion message."""
    return f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    if importlib.util.find_spec("build") is None:
        pytest.fail("`build` is not installed: install the dev extra (make test does)")
    out = tmp_path_factory.mktemp("dist")
    # The isolated build environment gets setuptools at CI's pinned version too.
    env = {**os.environ, "PIP_CONSTRAINT": str(ROOT / "constraints" / "ci.txt")}
    result = run([sys.executable, "-m", "build", "--outdir", out, ROOT], env=env)
    assert result.returncode == 0, explain(result)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    return Dist(wheel, sdist, metadata)


@pytest.fixture(scope="session")
def fresh_venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding the wheel and nothing else (not even pip); returns its bin/."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    # The package has no dependencies, so --no-deps installs exactly what a user gets.
    install = [sys.executable, "-m", "pip", "--python", str(python), "install"]
    result = run([*install, "--no-deps", "--no-index", "--quiet", str(dist.wheel)], env=clean_env())
    assert result.returncode == 0, explain(result)
    return root / "bin"


def clean_env() -> dict[str, str]:
    """The environment without anything that would point Python at this checkout."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_CONSTRAINT"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def in_venv(bin_dir: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [bin_dir / str(args[0]), *args[1:]]
    return run(command, cwd=cwd, env=clean_env())


# -- metadata ----------------------------------------------------------------------------------


def requirements(metadata: email.message.Message) -> list[Requirement]:
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def extra_of(requirement: Requirement) -> str | None:
    marker = requirement.marker
    if marker is None:
        return None
    extras = [e for e in USER_EXTRAS if marker.evaluate({"extra": e})]
    return extras[0] if len(extras) == 1 else "other"


def test_metadata_sets_floors_and_never_pins_torch_or_the_sdks(dist: Dist) -> None:
    reqs = requirements(dist.metadata)
    assert [str(r) for r in reqs if r.marker is None] == [], "the package itself needs nothing"
    brought: dict[str, set[str]] = {extra: set() for extra in USER_EXTRAS}
    for req in reqs:
        extra = extra_of(req)
        if extra in USER_EXTRAS:
            brought[extra].add(req.name)
            operators = {spec.operator for spec in req.specifier}
            assert ">=" in operators, f"{req} in [{extra}] has no floor"
            # An upper bound needs a known break, named in pyproject.toml; none exists today.
            assert operators <= ALLOWED_OPERATORS, f"{req} in [{extra}] pins or caps a version"
        # However they are reached (dev and test extras too), torch and the SDKs are never pinned.
        if req.name in set().union(*USER_EXTRAS.values()):
            assert not {s.operator for s in req.specifier} & {"==", "==="}, f"{req} is pinned"
    assert brought == USER_EXTRAS


def test_version_has_one_source(dist: Dist, fresh_venv: Path, tmp_path: Path) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as in CI
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert dist.version == declared
    assert dist.wheel.name.startswith(f"gradientmail-{declared}-")
    script = "import gradientmail; print(gradientmail.__version__); print(gradientmail.__file__)"
    result = in_venv(fresh_venv, "python", "-c", script, cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    version, location = result.stdout.split()
    assert version == declared
    assert Path(location).is_relative_to(fresh_venv.parent), "imported from outside the venv"


# -- contents ----------------------------------------------------------------------------------


def test_wheel_carries_the_package_and_nothing_else(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(f"gradientmail-{dist.version}.dist-info/entry_points.txt")
    dist_info = f"gradientmail-{dist.version}.dist-info/"
    package = [n for n in names if not n.startswith(dist_info)]
    # Only the package's modules and its typing marker: no tests, benchmarks, examples, or
    # emulator binaries.
    assert {n for n in package if not n.endswith(".py")} == {"gradientmail/py.typed"}
    assert all(n.startswith("gradientmail/") for n in package), package
    # Every module of the source tree, the conformance suite and its fakes among them.
    source = {f"gradientmail/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")}
    assert set(package) - {"gradientmail/py.typed"} == source
    assert {"gradientmail/conformance/_fakes.py", "gradientmail/conformance/_testing.py"} <= source
    text = entry_points.decode()
    assert "gradientmail = gradientmail._cli:main" in text
    assert "ignore-preconditions = gradientmail.conformance._fakes:" in text


def test_sdist_carries_the_sources_and_no_tests(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "src/gradientmail/py.typed"} <= names
    assert "src/gradientmail/conformance/_fakes.py" in names
    assert not [n for n in names if n.split("/")[0] in {"tests", "benchmarks", "examples"}]


def test_twine_check_passes(dist: Dist) -> None:
    result = run([sys.executable, "-m", "twine", "check", "--strict", dist.wheel, dist.sdist])
    assert result.returncode == 0, explain(result)


# -- the wheel alone, in a fresh venv -----------------------------------------------------------


def test_help_from_the_command_and_from_python_m(fresh_venv: Path, tmp_path: Path) -> None:
    command = in_venv(fresh_venv, "gradientmail", "--help", cwd=tmp_path)
    module = in_venv(fresh_venv, "python", "-m", "gradientmail", "--help", cwd=tmp_path)
    assert command.returncode == 0, explain(command)
    assert module.returncode == 0, explain(module)
    for name in ("race", "conformance", "status"):
        assert name in command.stdout
    assert module.stdout == command.stdout


def test_a_file_race_runs_with_the_wheel_alone(fresh_venv: Path, tmp_path: Path) -> None:
    url = (tmp_path / "box").as_uri()
    race = ["race", url, "--racers", "3", "--keys", "30"]
    result = in_venv(fresh_venv, "gradientmail", *race, cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    out = result.stdout
    assert "3 processes race for 30 keys" in out
    won = [int(line.split("won")[1].split()[0]) for line in out.splitlines() if " won " in line]
    assert len(won) == 3
    assert sum(won) == 30
    assert "every key has exactly one winner" in out


def test_the_shipped_fakes_load_and_are_caught(fresh_venv: Path, tmp_path: Path) -> None:
    # ignore-preconditions:// comes from the wheel's entry points and conformance/_fakes.py; a
    # race on it must find keys with more than one winner and exit 2.
    url = "ignore-preconditions://packaging"
    result = in_venv(fresh_venv, "gradientmail", "race", url, "--keys", "20", cwd=tmp_path)
    assert result.returncode == 2, explain(result)
    assert "winners (racer-" in result.stderr
