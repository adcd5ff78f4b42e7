"""Each exercise stub exposes exactly its solution's public names and signatures, and
where an exercise fills in a piece of the answer key, that piece has the same names.

(tiny-llm's "starter sync" idea: a stub that drifts from its solution, or from the code
it teaches, is a bug a learner finds first.)
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = sorted(p.stem for p in (ROOT / "exercises").glob("ex[0-9][0-9]_*.py"))

# (exercise module, name in it) -> (answer-key module, name there): same public methods
MIRRORS = {
    ("ex03_iteration_scheduler", "IterationScheduler.worst_case_blocks"):
        ("minillm.scheduler", "Scheduler.worst_case_blocks"),
    ("ex05_block_allocator", "BlockAllocator"): ("minillm.kv_cache", "BlockAllocator"),
    ("ex06_chunked_scheduler", "ChunkedPrefillScheduler"):
        ("minillm.scheduler", "ContinuousScheduler"),
    ("ex09_priority_aging", "effective_priority"):
        ("minillm.scheduler.policies", "effective_priority"),
    ("ex09_priority_aging", "priority_key"): ("minillm.scheduler.policies", "priority_key"),
    ("ex10_prefix_hashing", "hash_block"): ("minillm.kv_cache.prefix_cache", "hash_block"),
    ("ex10_prefix_hashing", "block_hashes"): ("minillm.kv_cache.prefix_cache", "block_hashes"),
}


def public_surface(path: Path) -> dict[str, list[str]]:
    """Public top-level functions and classes, and public methods: name -> parameter names."""
    tree = ast.parse(path.read_text())
    surface = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            if isinstance(node, ast.FunctionDef):
                surface[node.name] = [a.arg for a in node.args.args]
            else:
                surface[node.name] = []
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and (not item.name.startswith("_")
                                                              or item.name == "__init__"):
                        surface[f"{node.name}.{item.name}"] = [a.arg for a in item.args.args]
    return surface


@pytest.mark.unit
@pytest.mark.parametrize("name", EXERCISES)
def test_stub_and_solution_have_the_same_public_surface(name):
    stub = public_surface(ROOT / "exercises" / f"{name}.py")
    solution = public_surface(ROOT / "solutions" / f"{name}.py")
    assert stub == solution


def resolve(module: str, dotted: str):
    obj = importlib.import_module(module)
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def parameters(fn) -> list[str]:
    if isinstance(fn, property):                  # a property reads like def name(self)
        fn = fn.fget
    return list(inspect.signature(fn).parameters)


@pytest.mark.unit
@pytest.mark.parametrize("exercise,key", MIRRORS.items(), ids=[f"{m}.{n}" for m, n in MIRRORS])
def test_an_exercise_fills_in_the_answer_keys_own_names(exercise, key):
    surface = public_surface(ROOT / "solutions" / f"{exercise[0]}.py")
    target = resolve(*key)
    if inspect.isclass(target):
        mine = {k.split(".", 1)[1]: v for k, v in surface.items()
                if k.startswith(exercise[1] + ".") and k != f"{exercise[1]}.__init__"}
        assert mine, f"{exercise} has no public methods"
        for method, params in mine.items():
            assert hasattr(target, method), f"{key[1]} has no {method}: rename one of them"
            assert parameters(inspect.getattr_static(target, method)) == params, method
    else:
        assert surface[exercise[1]] == parameters(target)


@pytest.mark.unit
def test_the_flat_batch_uses_lesson_04s_field_names():
    import torch

    from minillm.model.batch import AttentionMetadata, FlatBatch
    solution = importlib.import_module("solutions.ex04_flat_batch")
    fields = set(FlatBatch.__dataclass_fields__) | set(AttentionMetadata.__dataclass_fields__)
    batch = solution.build_flat_batch([([1, 2, 3], 0, [0])], block_size=4)
    assert set(batch) <= fields and all(isinstance(t, torch.Tensor) for t in batch.values())
