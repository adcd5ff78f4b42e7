"""Lesson 07 exercise: paged decode attention in Triton, graded in the interpreter.

The learner's kernel runs in a *child process* (this file, run as a script): an
out-of-bounds `tl.load` segfaults Triton's interpreter and an endless loop never
returns, and neither may take the grader down. The child writes one file per case;
the tests compare them, in this process, with `kernels.paged_decode_attention_ref`.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXERCISE = "ex07_paged_decode_kernel"
REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 240
ATOL = 1e-4

# name -> (seed, seq_lens, num_q_heads, num_kv_heads, head_dim, block_size, q_scale)
CASES = {
    "one_head": (0, [16], 1, 1, 16, 4, 1.0),
    "gqa_group_3": (1, [12, 7], 6, 2, 16, 4, 1.0),
    "gqa_group_4_dim_24": (2, [9], 4, 1, 24, 8, 1.0),
    "ragged_shuffled": (3, [1, 13, 32, 6], 4, 2, 16, 8, 1.0),
    "large_scores": (4, [21, 3], 2, 2, 16, 4, 60.0),
}


def make_case(seed, seq_lens, num_q_heads, num_kv_heads, head_dim, block_size, q_scale):
    """A paged cache with each sequence's blocks at shuffled physical places.

    Slots a sequence does not use, spare blocks, and block-table entries past a
    sequence's last block all point at NaN-filled memory: a kernel that reads past
    `seq_len` without masking gets NaN in its output.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [math.ceil(n / block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + 2                           # two spare blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"))
    v_cache = torch.full(shape, float("nan"))
    order = torch.randperm(num_blocks, generator=gen).tolist()     # physical ids, shuffled
    spare = order[-1]
    max_blocks = max(blocks_per_seq) + 1                           # always an unused column
    block_tables = torch.full((len(seq_lens), max_blocks), spare, dtype=torch.int32)
    used = 0
    for b, (n, nb) in enumerate(zip(seq_lens, blocks_per_seq)):
        ids = order[used:used + nb]
        used += nb
        block_tables[b, :nb] = torch.tensor(ids, dtype=torch.int32)
        for p in range(n):                                          # fill the real tokens
            blk, row = ids[p // block_size], p % block_size
            k_cache[blk, row] = torch.randn(num_kv_heads, head_dim, generator=gen)
            v_cache[blk, row] = torch.randn(num_kv_heads, head_dim, generator=gen)
    q = torch.randn(len(seq_lens), num_q_heads, head_dim, generator=gen) * q_scale
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32)
    return q, k_cache, v_cache, block_tables, seq_lens_t, 1.0 / math.sqrt(head_dim)


def _child(out_dir: str) -> None:
    """Run the graded module's kernel on every case; one result file per case."""
    sys.path.insert(0, str(REPO_ROOT))
    import kernels  # noqa: F401  (TRITON_INTERPRET before triton is imported)
    import torch

    from minillm.grading import load_exercise

    ex = load_exercise(EXERCISE)
    for name, spec in CASES.items():
        try:
            result = ex.paged_decode_attention(*make_case(*spec))
        except Exception as error:  # noqa: BLE001 - reported to the parent as text
            result = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        torch.save(result, Path(out_dir) / f"{name}.pt")


@pytest.fixture(scope="module")
def kernel_outputs(tmp_path_factory):
    """{case: output tensor or error message} from one child process."""
    out_dir = tmp_path_factory.mktemp("ex07")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    try:
        proc = subprocess.run([sys.executable, __file__, str(out_dir)], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        last_words = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        crash = None if proc.returncode == 0 else (
            f"the kernel's process died (exit code {proc.returncode}): an unmasked tl.load or "
            f"tl.store outside its tensor? {last_words}".strip())
    except subprocess.TimeoutExpired:
        crash = f"the kernel did not finish within {CHILD_TIMEOUT_S} s: an endless loop?"
    import torch

    outputs = {}
    for name in CASES:
        path = out_dir / f"{name}.pt"
        outputs[name] = torch.load(path) if path.exists() else (crash or "no result")
    return outputs


def check_case(outputs, name):
    import torch

    from kernels import paged_decode_attention_ref

    got = outputs[name]
    assert isinstance(got, torch.Tensor), f"case {name}: {got}"
    want = paged_decode_attention_ref(*make_case(*CASES[name]))
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"case {name}: got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}")
    assert not torch.isnan(got).any(), (
        f"case {name}: NaN in the output: an output row never written, or a read past "
        "seq_len (unused cache slots hold NaN here) without a mask")
    error = (got - want).abs().max().item()
    assert error <= ATOL, f"case {name}: max |kernel - reference| = {error:.2e} > {ATOL:g}"


# ---------------------------------------------------------------------- the tasks

def test_online_softmax_step(ex):
    import torch

    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(16, generator=gen) * 3 + 1000.0     # huge scores: exp would overflow
    scores[5] = float("-inf")                                 # a key to ignore
    values = torch.randn(16, 8, generator=gen)
    m, l, acc = torch.tensor(float("-inf")), torch.tensor(0.0), torch.zeros(8)
    first = ex.online_softmax_step(m, l, acc, scores[:3], values[:3])
    assert m.item() == float("-inf") and l.item() == 0.0 and not acc.any(), "inputs were modified"
    want_m = scores[:3].max()
    assert torch.allclose(first[0], want_m)
    assert torch.allclose(first[1], torch.exp(scores[:3] - want_m).sum())
    assert torch.allclose(first[2], torch.exp(scores[:3] - want_m) @ values[:3], atol=1e-5)
    state = first
    for lo, hi in ((3, 8), (8, 9), (9, 16)):                  # uneven blocks
        state = ex.online_softmax_step(*state, scores[lo:hi], values[lo:hi])
    m, l, acc = state
    want = torch.softmax(scores, dim=0) @ values               # [8]
    assert torch.isfinite(acc / l).all(), "overflow: subtract the running max before exp"
    assert torch.allclose(acc / l, want, atol=1e-5)
    assert m.item() == scores.max().item()


def test_kernel_one_sequence_one_head(kernel_outputs):
    check_case(kernel_outputs, "one_head")


def test_kernel_grouped_query_attention(kernel_outputs):
    check_case(kernel_outputs, "gqa_group_3")
    check_case(kernel_outputs, "gqa_group_4_dim_24")


def test_kernel_ragged_lengths_and_shuffled_blocks(kernel_outputs):
    check_case(kernel_outputs, "ragged_shuffled")


def test_kernel_large_scores_stay_finite(kernel_outputs):
    check_case(kernel_outputs, "large_scores")


if __name__ == "__main__":
    _child(sys.argv[1])
