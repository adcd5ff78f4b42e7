"""The forward pass of any commit, imported beside the working tree's, in one process.

`history.py` times a decode step of several commits side by side. Each commit's
`minillm/` folder is read from git (`git archive`) into a temporary folder and
imported there *in isolation*: while it loads, the process's own `minillm` modules
are taken out of `sys.modules` and a finder serves `minillm.*` only from that folder;
afterwards everything is put back. The loaded modules keep their own globals, so each
version keeps calling its own siblings — an old `model.py` its old attention and
metadata, even where those files have since moved or been renamed.

From each version three pieces are taken, wherever that version kept them (`PLACES`,
tried in order):

    model            minillm.model.llama.LlamaModel
    attention        the version's default CPU backend: minillm_cpu.cpp_attention's
                     CppAttention where it exists, else minillm.attention.SparseAttention,
                     else minillm.attention.TorchAttention (a module before the
                     re-layout, a package re-exporting it after)
    build_metadata   minillm.model.batch.build_attention_metadata,
                     or (before the re-layout) minillm.attention_metadata's

`"."` names the working tree: the modules this process already imported.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from importlib.abc import MetaPathFinder
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
WORKTREE = "."
PLACES = {
    "model": (("minillm.model.llama", "LlamaModel"),),
    "attention": (("minillm_cpu.cpp_attention", "CppAttention"),
                  ("minillm.attention", "SparseAttention"), ("minillm.attention", "TorchAttention")),
    "build_metadata": (("minillm.model.batch", "build_attention_metadata"),
                       ("minillm.attention_metadata", "build_attention_metadata")),
}


@dataclass
class Version:
    """One commit's model class, default CPU attention backend class and metadata builder."""

    name: str
    model: type
    attention: type
    build_metadata: Callable


def _is_minillm(name: str) -> bool:
    return name == "minillm" or name.startswith("minillm.")


class _OnlyFrom(MetaPathFinder):
    """Finds `minillm` and its submodules under `root` and nowhere else (an installed
    or editable `minillm` would otherwise fill in a module the old tree lacks)."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if not _is_minillm(fullname):
            return None
        spec = PathFinder.find_spec(fullname, path if "." in fullname else [str(self.root)])
        if spec is None:
            raise ModuleNotFoundError(f"no module named {fullname!r} in {self.root}", name=fullname)
        return spec


@contextlib.contextmanager
def isolated_minillm(root: Path):
    """While the block runs, `import minillm...` loads from `root/minillm/`; the
    process's own `minillm` modules are hidden meanwhile and restored afterwards."""
    ours = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_minillm(name)}
    finder = _OnlyFrom(root)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if _is_minillm(n)]:
            del sys.modules[name]
        sys.modules.update(ours)


def find(places) -> object:
    """The first `(module, attribute)` of `places` that exists in this version."""
    for module_name, attribute in places:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise                   # the module exists but imports something missing
            continue
        if hasattr(module, attribute):
            return getattr(module, attribute)
    raise LookupError(f"none of {[f'{m}.{a}' for m, a in places]} exists in this version")


def _pieces(name: str) -> Version:
    return Version(name, **{piece: find(places) for piece, places in PLACES.items()})


def extract(commit: str, folder: Path) -> Path:
    """`minillm/` of `commit`, written under `folder`; the root that holds it."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "minillm"], cwd=REPO,
                             check=True, capture_output=True).stdout
    root = folder / re.sub(r"[^\w.-]", "_", commit)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def load_version(commit: str, folder: Path) -> Version:
    """The pieces of `commit` (or of the working tree, for "."), imported in isolation."""
    if commit == WORKTREE:
        return _pieces(commit)
    with isolated_minillm(extract(commit, folder)):
        return _pieces(commit)
