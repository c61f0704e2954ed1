"""Every Python block in ``docs/`` runs as pasted, with the reader's own parts defined here.

A page leaves some names to the reader (``build_model``, ``shards``, ``load_shard``,
``train``...). Their stand-ins live in :data:`PLACEHOLDERS`, the one place they are
defined: each block is saved as a script and run in a fresh interpreter, with only the
names it uses and does not define itself imported from them, so a block that forgot an
import of its own (``torch``) still fails. Store URLs are moved into the test's directory
(``s3://bucket/...`` and ``file:///tmp/...`` both become ``file://`` URLs there).

What the prose around a block asks for is done as a reader would: a block after "Save it
as ``name.py``" is saved under that name (a ``test_*.py`` one is then run with pytest); an
indented block adds its methods to the class of the block before it; and a ``toml`` block
naming ``gradientmail.backends`` entry points is installed as ``pip install -e .`` would
(its entry points, in a ``.dist-info`` beside the scripts).
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))

#: The reader's own parts, as one module the blocks import from: small, CPU-only stand-ins.
PLACEHOLDERS = '''
import os
import torch
import gradientmail

_URL = os.environ["DOCS_URL"]
box = gradientmail.from_url(_URL + "/placeholder-box")
epochs = 2
paths = [f"data/shard-{i}.bin" for i in range(4)]
shards = {f"shard-{i:03d}": i for i in range(4)}
loss_fn = torch.nn.functional.mse_loss


def build_model():
    torch.manual_seed(0)
    layers = (torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    return torch.nn.Sequential(*layers)


def load_shard(shard):
    """A shard's items: (x, y) pairs."""
    generator = torch.Generator().manual_seed(hash(str(shard)) % 1000)
    for _ in range(3):
        yield torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator)


def load_examples(shard):
    """A shard's items one (x, y) example at a time: 40, so batches of 32 never leave 1."""
    generator = torch.Generator().manual_seed(hash(str(shard)) % 1000)
    for _ in range(40):
        yield torch.randn(4, generator=generator), torch.randn(1, generator=generator)


def train(*batch):
    pass


def make_items():
    for n in range(3):
        yield torch.full((2,), float(n)).numpy().tobytes()


def bytes_to_tensors(data):
    return torch.frombuffer(bytearray(data), dtype=torch.float32)


def __getattr__(name):
    """The pieces of a DDP script, built on first use: one gloo process of its own."""
    if name not in ("net", "dataset", "loader", "optimizer"):
        raise AttributeError(name)
    import torch.distributed as dist
    from gradientmail.torch import SharedQueueDataset, SharedQueueLoader

    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", init_method="file://" + os.path.join(os.getcwd(), "ddp-rendezvous"),
            rank=0, world_size=1,
        )
    net = globals().setdefault("net", torch.nn.Linear(4, 1))
    dataset = globals().setdefault(
        "dataset", SharedQueueDataset(shards, mailbox=gradientmail.from_url(_URL + "/ddp"),
                                      load=load_shard, learner_id="rank0")
    )
    globals().setdefault("loader", SharedQueueLoader(dataset, batch_size=None))
    globals().setdefault("optimizer", torch.optim.SGD(net.parameters(), lr=0.01))
    return globals()[name]
'''


@dataclass
class Block:
    page: str
    line: int
    language: str
    code: str
    #: The prose line right before the block.
    lead: str


def _blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in re.finditer(r"^```(python|toml)\n(.*?)^```", text, re.S | re.M):
        lead = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page.name, line, match.group(1), match.group(2), lead))
    return found


PAGES = {page.name: _blocks(page) for page in DOCS}


def _free_names(code: str) -> set[str]:
    """Names a script reads at any depth but never binds (assigns, imports, defines)."""
    tree = ast.parse(code)
    read: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


def _placeholder_names() -> set[str]:
    tree = ast.parse(PLACEHOLDERS)
    names = {"net", "dataset", "loader", "optimizer"}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {
                t.id for t in node.targets if isinstance(t, ast.Name) and not t.id.startswith("_")
            }
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            names.add(node.name)
    return names


def _install_entry_points(toml: str, folder: Path) -> None:
    """What ``pip install -e .`` of this pyproject makes visible: its name, version and
    ``gradientmail.backends`` entry points, as a ``.dist-info`` on the scripts' path."""
    name = re.search(r'^name = "(.+)"', toml, re.M)
    version = re.search(r'^version = "(.+)"', toml, re.M)
    section = toml.split('[project.entry-points."gradientmail.backends"]', 1)
    assert name, "a pyproject with a name"
    assert version, "a pyproject with a version"
    assert len(section) == 2, "a pyproject with backend entry points"
    info = folder / f"{name.group(1).replace('-', '_')}-{version.group(1)}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name.group(1)}\nVersion: {version.group(1)}\n"
    )
    entries = section[1].strip().split("\n[", 1)[0].replace('"', "")  # TOML strings: bare
    (info / "entry_points.txt").write_text(f"[gradientmail.backends]\n{entries}\n")


def _run(args: list[str], folder: Path, what: str) -> None:
    done = subprocess.run(
        args,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "DOCS_URL": f"file://{folder}/stores"},
    )
    assert done.returncode == 0, f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def test_every_page_with_python_is_covered_and_every_placeholder_is_used() -> None:
    used: set[str] = set()
    for blocks in PAGES.values():
        for block in blocks:
            if block.language == "python" and not block.code.startswith(" "):
                used |= _free_names(block.code)
    assert _placeholder_names() <= used | {"box"}, _placeholder_names() - used
    assert sum(len(blocks) for blocks in PAGES.values()) >= 12


@pytest.mark.parametrize("page", sorted(p for p, blocks in PAGES.items() if blocks))
def test_every_block_of_the_page_runs_as_pasted(page: str, tmp_path: Path) -> None:
    (tmp_path / "docs_placeholders.py").write_text(PLACEHOLDERS)
    (tmp_path / "stores").mkdir()
    saved: Path | None = None
    available = _placeholder_names()
    for number, block in enumerate(PAGES[page]):
        where = f"{page} line {block.line}"
        if block.language == "toml":
            if "gradientmail.backends" in block.code:
                _install_entry_points(block.code, tmp_path)
            continue
        code = block.code.replace("s3://bucket/", f"file://{tmp_path}/stores/")
        code = code.replace("file:///tmp/", f"file://{tmp_path}/stores/")
        if code.startswith(" "):  # methods for the class of the block saved before
            assert saved is not None, f"{where}: an indented block with no class before it"
            saved.write_text(saved.read_text() + "\n" + code)
            continue
        free = sorted(_free_names(code))
        missing = [name for name in free if name not in available]
        assert not missing, f"{where} uses {missing}, which neither it nor a placeholder defines"
        prelude = f"from docs_placeholders import {', '.join(free)}\n" if free else ""
        named = re.search(r"Save (?:it|this) as `([\w.]+\.py)`", block.lead)
        if named is not None:
            saved = tmp_path / named.group(1)
            saved.write_text(prelude + code)
            if saved.name.startswith("test_"):
                _run([sys.executable, "-m", "pytest", saved.name, "-q", "-x"], tmp_path, where)
            continue
        script = tmp_path / f"block_{number}.py"
        script.write_text(prelude + code)
        _run([sys.executable, script.name], tmp_path, where)
