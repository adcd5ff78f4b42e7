"""What each performance commit bought: one decode step, old code vs new, same run.

    python -m benchmarks.history 7d34ce2 bd02842 HEAD --batch 16 --rounds 20
    python -m benchmarks.history 6270ea3 . --context 1000,60x15   # "." = working tree

Every commit's forward pass is imported beside the others (`git_versions.py`), so
several versions of `model.py` and the torch attention live in one process. Each
builds the model from the same weights and gets its own copy of one KV cache
(identical contents); then a decode step — `batch` sequences, one new token each,
`context` tokens already cached, blocks scattered through the cache — is timed for
each version in turn, the order reversed every round (see `ab.py`). Printed: the load
average, the median step time per commit with the fastest and slowest round, the
median of per-round ratios against the first commit, and the largest logit difference
from the first commit. `docs/performance.md` quotes its numbers.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.ab import alternate, median, paired_ratios
from benchmarks.git_versions import Version, load_version

BLOCK_SIZE = 16


def parse_contexts(text: str, batch: int) -> list[int]:
    """Tokens already cached per sequence: "128" (every one of `batch` sequences) or a
    list with repeats, "1000,60x15" → [1000, 60, 60, …] (the batch is its length)."""
    if "," not in text and "x" not in text:
        return [int(text)] * batch
    contexts = []
    for part in text.split(","):
        value, _, times = part.partition("x")
        contexts += [int(value)] * int(times or 1)
    return contexts


def decode_batch(contexts: list[int], block_size: int, num_blocks: int, build_metadata=None,
                 vocab_size: int = 40000):
    """Inputs of one decode step with scattered block tables (the same every call):
    (token ids [B], positions [B], attention metadata, logits rows [B]).

    `build_metadata` is a version's `build_attention_metadata` (default: the working
    tree's)."""
    from minillm.kv_cache.allocator import cdiv, slot_of
    if build_metadata is None:
        from minillm.model.batch import build_attention_metadata as build_metadata
    order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(0)).tolist()
    tables, start = [], 0
    for n in (cdiv(c + 1, block_size) for c in contexts):
        tables.append(order[start:start + n])
        start += n
    slots = [slot_of(t, c, block_size) for t, c in zip(tables, contexts)]
    meta = build_metadata([1] * len(contexts), [c + 1 for c in contexts], tables, slots,
                          block_size, torch.device("cpu"))
    high = min(40000, vocab_size)
    ids = torch.randint(min(100, high // 2), high, (len(contexts),),
                        generator=torch.Generator().manual_seed(1))
    return ids, torch.tensor(contexts), meta, torch.arange(len(contexts))


def filled_cache(hf_config, num_blocks: int, dtype: torch.dtype) -> list:
    """A KV cache of plausible keys and values (seeded normals, not zeros)."""
    from minillm.kv_cache.tensors import allocate_kv_cache
    head_dim = (getattr(hf_config, "head_dim", None)
                or hf_config.hidden_size // hf_config.num_attention_heads)
    cache = allocate_kv_cache(hf_config.num_hidden_layers, num_blocks, BLOCK_SIZE,
                              hf_config.num_key_value_heads, head_dim, dtype, "cpu")
    for k, v in cache:
        k.normal_(0, 1, generator=torch.Generator().manual_seed(2))
        v.normal_(0, 1, generator=torch.Generator().manual_seed(3))
    return cache


class Contender:
    """One version ready to step: its model, its attention backend, its own KV copy."""

    def __init__(self, version: Version, hf, dtype: torch.dtype, cache: list,
                 max_num_seqs: int = 16):
        self.version = version
        self.vocab_size = hf.config.vocab_size
        # the engine's batch slots, for versions whose weights are packed for them
        knobs = ({"full_batch": max_num_seqs}
                 if "full_batch" in inspect.signature(version.model.from_hf).parameters else {})
        self.model = version.model.from_hf(hf, dtype=dtype, **knobs)
        self.backend = version.attention()
        self.kv = [(k.clone(), v.clone()) for k, v in cache]

    def step(self, contexts: list[int], num_blocks: int) -> tuple[float, torch.Tensor]:
        """(seconds, logits) of one decode step; the inputs are built outside the timing."""
        ids, pos, meta, rows = decode_batch(contexts, BLOCK_SIZE, num_blocks,
                                            self.version.build_metadata, self.vocab_size)
        start = time.perf_counter()
        logits = self.model(ids, pos, self.kv, meta, rows, self.backend)
        return time.perf_counter() - start, logits


def compare(versions: list[Version], hf, contexts: list[int], dtype: torch.dtype,
            rounds: int, max_num_seqs: int = 16) -> dict:
    """Every version's decode step, alternating rounds: {name: {"rounds": [s, ...],
    "max_logit_diff": …, "ratio": first / this}} (ratio and diff against the first)."""
    from minillm.kv_cache.allocator import cdiv
    num_blocks = sum(cdiv(c + 1, BLOCK_SIZE) for c in contexts) + 4
    cache = filled_cache(hf.config, num_blocks, dtype)
    contenders = {v.name: Contender(v, hf, dtype, cache, max_num_seqs) for v in versions}
    for c in contenders.values():                     # warm-up
        c.step(contexts, num_blocks)
    first = versions[0].name
    reference = contenders[first].step(contexts, num_blocks)[1]
    diffs = {name: (c.step(contexts, num_blocks)[1] - reference).abs().max().item()
             for name, c in contenders.items()}
    results = alternate({name: (lambda c=c: {"s": c.step(contexts, num_blocks)[0]})
                         for name, c in contenders.items()}, rounds)
    return {name: {"rounds": [r["s"] for r in results[name]], "max_logit_diff": diffs[name],
                   "ratio": median(paired_ratios(results, first, name, "s"))}
            for name in contenders}


def load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args(argv=None) -> argparse.Namespace:
    from benchmarks.__main__ import positive_int
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commits", nargs="+", help='commits, or "." for the working tree')
    parser.add_argument("--batch", type=positive_int, default=16)
    parser.add_argument("--context", default="128",
                        help='tokens cached per sequence: "128", or a list such as "1000,60x15"')
    parser.add_argument("--rounds", type=positive_int, default=20)
    parser.add_argument("--max-num-seqs", type=positive_int, default=16,
                        help="the engine's batch slots (weights may be packed for that many rows)")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args(argv)
    if len(set(args.commits)) != len(args.commits):
        parser.error(f"a commit is named twice in {args.commits}")
    return args


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    contexts = parse_contexts(args.context, args.batch)
    from minillm.model.loader import load_hf_model
    hf, _ = load_hf_model(args.model)
    load_start = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        versions = [load_version(commit, Path(tmp)) for commit in args.commits]
        results = compare(versions, hf, contexts, getattr(torch, args.dtype), args.rounds,
                          args.max_num_seqs)
    first = args.commits[0]
    print(f"decode step, batch {len(contexts)} (max_num_seqs {args.max_num_seqs}), "
          f"context {args.context}, {args.dtype}, "
          f"{args.threads} threads, {args.rounds} rounds alternating; load average "
          f"{load_start} at start, {load_average()} at end")
    for name, r in results.items():
        ms = [1000 * s for s in r["rounds"]]
        print(f"{name:>12}: median {median(ms):7.1f} ms (rounds {min(ms):.1f}–{max(ms):.1f})"
              f"   {first}/this {r['ratio']:5.2f}×   max |logit − {first}| {r['max_logit_diff']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
