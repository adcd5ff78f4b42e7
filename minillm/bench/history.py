"""What each performance commit bought: one decode step, old code vs new, same run.

    python -m minillm.bench.history 7d34ce2 bd02842 HEAD --batch 16 --rounds 20
    python -m minillm.bench.history 6270ea3 HEAD --context 1000,60x15   # mixed lengths

For every commit given, `minillm/model.py` and `minillm/attention.py` are read from git
(`git show COMMIT:path`) and imported as separate modules, so several versions of the
forward pass live in one process. Each builds the model from the same weights and gets
its own copy of one KV cache (identical contents); then a decode step — `batch`
sequences, one new token each, `context` tokens already cached, blocks scattered
through the cache — is timed for each version in turn, the order reversed every round
(see `ab.py`). Printed: median step time per commit, the median of per-round ratios
against the first commit, and the largest logit difference from the first commit.
Used for the numbers in minillm/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from minillm.bench.ab import alternate, median, paired_ratios


def load_version(commit: str, folder: Path):
    """(model module, attention module) of `commit`, imported under unique names."""
    modules = []
    for name in ("model", "attention"):
        source = subprocess.run(["git", "show", f"{commit}:minillm/{name}.py"], check=True,
                                capture_output=True, text=True).stdout
        path = folder / f"{name}_{commit.replace('~', '_')}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


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


def decode_batch(contexts: list[int], block_size: int, num_blocks: int):
    """Inputs of one decode step with scattered block tables (the same every call)."""
    from minillm.flat_batch import build_attention_metadata
    per_seq = [-(-(c + 1) // block_size) for c in contexts]
    order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(0)).tolist()
    tables, start = [], 0
    for n in per_seq:
        tables.append(order[start:start + n])
        start += n
    slots = [t[c // block_size] * block_size + c % block_size for t, c in zip(tables, contexts)]
    meta = build_attention_metadata([1] * len(contexts), [c + 1 for c in contexts], tables,
                                    slots, block_size, torch.device("cpu"))
    ids = torch.randint(100, 40000, (len(contexts),), generator=torch.Generator().manual_seed(1))
    return ids, torch.tensor(contexts), meta, torch.arange(len(contexts))


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="python -m minillm.bench.history", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commits", nargs="+")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", default="128",
                        help='tokens cached per sequence: "128", or a list such as "1000,60x15"')
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    from minillm.kv_cache.tensors import allocate_kv_cache
    from minillm.model_loader import load_hf_model
    hf, _ = load_hf_model(args.model)
    block_size = 16
    contexts = parse_contexts(args.context, args.batch)
    num_blocks = sum(-(-(c + 1) // block_size) for c in contexts) + 4
    cache = None
    versions = {}
    with tempfile.TemporaryDirectory() as tmp:
        for commit in args.commits:
            model_mod, attention_mod = load_version(commit, Path(tmp))
            model = model_mod.LlamaModel.from_hf(hf, dtype=dtype)
            if cache is None:
                cache = allocate_kv_cache(model.num_layers, num_blocks, block_size,
                                          model.num_kv_heads, model.head_dim, dtype, "cpu")
                for k, v in cache:                     # plausible keys/values, not zeros
                    k.normal_(0, 1, generator=torch.Generator().manual_seed(2))
                    v.normal_(0, 1, generator=torch.Generator().manual_seed(3))
            versions[commit] = (model, attention_mod.TorchAttention(),
                                [(k.clone(), v.clone()) for k, v in cache])

    def step(commit):
        model, backend, kv = versions[commit]
        ids, pos, meta, rows = decode_batch(contexts, block_size, num_blocks)
        start = time.perf_counter()
        logits = model(ids, pos, kv, meta, rows, backend)
        return {"s": time.perf_counter() - start, "logits": logits}

    first = args.commits[0]
    for commit in args.commits:                        # warm-up, and the logit check
        step(commit)
    ref = step(first)["logits"]
    diffs = {c: (step(c)["logits"] - ref).abs().max().item() for c in args.commits}
    results = alternate({c: (lambda c=c: {"s": step(c)["s"]}) for c in args.commits}, args.rounds)
    print(f"decode step, batch {len(contexts)}, context {args.context}, {args.dtype}, "
          f"{args.threads} threads, {args.rounds} rounds; load average {os.getloadavg()}")
    for commit in args.commits:
        ratio = median(paired_ratios(results, first, commit, "s"))
        print(f"{commit:>12}: median {1000 * median([r['s'] for r in results[commit]]):7.1f} ms"
              f"   {first}/this {ratio:5.2f}×   max |logit − {first}| {diffs[commit]:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
