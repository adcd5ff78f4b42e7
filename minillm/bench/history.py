"""What each performance commit bought: one decode step, old code vs new, same run.

    python -m minillm.bench.history 7d34ce2 bd02842 HEAD --batch 16 --rounds 20

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


def decode_batch(batch: int, context: int, block_size: int, num_blocks: int):
    """Inputs of one decode step with scattered block tables (the same every call)."""
    from minillm.attention_metadata import build_attention_metadata
    per_seq = -(-(context + 1) // block_size)
    order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(0)).tolist()
    tables = [order[b * per_seq:(b + 1) * per_seq] for b in range(batch)]
    slots = [t[context // block_size] * block_size + context % block_size for t in tables]
    meta = build_attention_metadata([1] * batch, [context + 1] * batch, tables, slots,
                                    block_size, torch.device("cpu"))
    ids = torch.randint(100, 40000, (batch,), generator=torch.Generator().manual_seed(1))
    return ids, torch.full((batch,), context), meta, torch.arange(batch)


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="python -m minillm.bench.history", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commits", nargs="+")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    from minillm.kv_cache import allocate_kv_cache
    from minillm.model_loader import load_hf_model
    hf, _ = load_hf_model(args.model)
    block_size = 16
    num_blocks = args.batch * (-(-(args.context + 1) // block_size)) + 4
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
        ids, pos, meta, rows = decode_batch(args.batch, args.context, block_size, num_blocks)
        start = time.perf_counter()
        logits = model(ids, pos, kv, meta, rows, backend)
        return {"s": time.perf_counter() - start, "logits": logits}

    first = args.commits[0]
    for commit in args.commits:                        # warm-up, and the logit check
        step(commit)
    ref = step(first)["logits"]
    diffs = {c: (step(c)["logits"] - ref).abs().max().item() for c in args.commits}
    results = alternate({c: (lambda c=c: {"s": step(c)["s"]}) for c in args.commits}, args.rounds)
    print(f"decode step, batch {args.batch}, context {args.context}, {args.dtype}, "
          f"{args.threads} threads, {args.rounds} rounds; load average {os.getloadavg()}")
    for commit in args.commits:
        ratio = median(paired_ratios(results, first, commit, "s"))
        print(f"{commit:>12}: median {1000 * median([r['s'] for r in results[commit]]):7.1f} ms"
              f"   {first}/this {ratio:5.2f}×   max |logit − {first}| {diffs[commit]:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
