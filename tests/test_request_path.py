"""The request path the README states is the one the code takes.

One `LLM.generate` request on the tiny model is traced with `sys.setprofile`: every
moment the running frame's file changes, inside minillm/, is one step of the path.
The README's path ("One `LLM.generate` request crosses …") must appear in that order,
and the readable engine's forward must leave `model/llama.py` only for attention (and
for PyTorch, which is not traced).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from minillm import LLM, SamplingParams
from minillm.model.tiny import build_tiny_llama

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("minillm", "minillm_cpu")


def traced_path(run) -> list[str]:
    """The files (relative to the repository) the running frame is in, in order,
    consecutive repeats collapsed, while `run()` runs."""
    path: list[str] = []

    def where(frame) -> str | None:
        name = frame.f_code.co_filename
        try:
            relative = Path(name).resolve().relative_to(ROOT)
        except ValueError:
            return None
        return str(relative) if relative.parts[0] in PACKAGES else None

    def profile(frame, event, arg):
        if event not in ("call", "return"):
            return
        if event == "return":
            frame = frame.f_back
            while frame is not None and where(frame) is None:   # back into PyTorch etc.
                frame = frame.f_back
            if frame is None:
                return
        here = where(frame)
        if here is not None and (not path or path[-1] != here):
            path.append(here)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return path


def readme_path() -> list[str]:
    """The files of the README's "One `LLM.generate` request crosses …" line, in order."""
    text = (ROOT / "README.md").read_text()
    line = re.search(r"One `LLM\.generate` request crosses (.*?)\.\n\n", text, re.S).group(1)
    names = re.findall(r"[\w/]+\.py|[\w]+/(?=[ `])", line.replace("\n", " "))
    return [n if n.endswith("/") else n for n in names]


def is_in_order(wanted: list[str], path: list[str]) -> bool:
    """Does `path` visit `wanted` in that order (a folder: any file in it)?"""
    position = 0
    for name in wanted:
        for i in range(position, len(path)):
            if path[i] == f"minillm/{name}" or (name.endswith("/") and
                                                 path[i].startswith(f"minillm/{name}")):
                position = i + 1
                break
        else:
            return False
    return True


@pytest.fixture(scope="module")
def generate_path():
    llm = LLM(build_tiny_llama(seed=0), executor="eager", attention_backend="torch",
              max_num_seqs=2)
    params = SamplingParams(temperature=0.0, max_tokens=3)
    return traced_path(lambda: llm.generate([{"prompt_token_ids": [5, 6, 7]}], params,
                                            use_tqdm=False))


def test_the_readme_path_is_the_path_of_a_request(generate_path):
    wanted = readme_path()
    assert len(wanted) >= 8 and "model/llama.py" in wanted, wanted
    assert is_in_order(wanted, generate_path), (wanted, generate_path)
    assert not is_in_order(wanted[::-1], generate_path)        # the check can fail


def test_the_readable_forward_leaves_llama_py_only_for_attention(generate_path):
    """In a forward pass, model/llama.py calls into minillm only to attend."""
    left_for = {generate_path[i + 1] for i, here in enumerate(generate_path[:-1])
                if here == "minillm/model/llama.py"}
    callers = {"minillm/model/model_runner.py", "minillm/model/loader.py"}   # returns to them
    assert left_for - callers and all(f.startswith("minillm/attention/")
                                      for f in left_for - callers), left_for
    assert not any(f.startswith("minillm_cpu/") for f in generate_path)
