"""Issue 18: a replayed decode step split into matmuls, attention and the rest, in place.
    .venv/bin/python scripts/experiments/step_split.py float32|bfloat16 [BATCH]

Replays one decode step captured from the engine (`captured_steps.py`; B sequences at
~128 tokens of context, default 16) and times, inside the forward pass itself, every
weight matmul (`packed_linear.linear`) and every attention call (the backend), 30 passes;
prints the median pass split into matmuls, attention, and the rest (norms, RoPE,
SiLU·up, residual adds, the embedding, Python). Unlike `step_parts.py`, which times
the parts on their own, this keeps each part in its place between the others."""
import sys
import time

import torch

from captured_steps import decode_batches                          # this folder
import minillm.model.llama as model_module
import minillm_cpu.packed_linear as packed_linear
from minillm import LLM


def split(dtype_name: str, batch_size: int, passes: int = 30) -> dict[str, float]:
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype_name)
    batch = decode_batches(llm, sizes=(batch_size,))[batch_size]
    runner = llm.llm_engine.runner
    spent = {"matmuls": 0.0, "attention": 0.0}
    linear, backend = packed_linear.linear, runner.backend

    def timed_linear(x, weight, bias=None, packed=None):
        start = time.perf_counter()
        out = linear(x, weight, bias, packed)
        spent["matmuls"] += time.perf_counter() - start
        return out

    def timed_attention(*args):
        start = time.perf_counter()
        out = backend(*args)
        spent["attention"] += time.perf_counter() - start
        return out
    timed_attention.name = backend.name
    timed_attention.cpu_kernels = getattr(backend, "cpu_kernels", None)   # "cpp": C++ element-wise too
    model_module.linear = timed_linear                  # the tied lm_head calls it there
    packed_linear.linear = timed_linear                 # the Linear layers call it here
    try:
        rows = []
        for i in range(passes + 5):
            spent.update(matmuls=0.0, attention=0.0)
            batch.meta.scratch.clear()                  # re-plan the step, as the engine does
            start = time.perf_counter()
            runner.model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                         batch.logits_indices, timed_attention)
            if i >= 5:                                  # the first passes warm up
                rows.append((time.perf_counter() - start, spent["matmuls"], spent["attention"]))
    finally:
        model_module.linear = packed_linear.linear = linear
    total, matmuls, attention = sorted(rows)[len(rows) // 2]
    return {"forward": total, "matmuls": matmuls, "attention": attention,
            "rest": total - matmuls - attention}


if __name__ == "__main__":
    torch.set_num_threads(2)
    dtype_name = sys.argv[1] if len(sys.argv) > 1 else "float32"
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    t = {k: 1e3 * v for k, v in split(dtype_name, size).items()}
    print(f"{dtype_name} batch {size}: forward {t['forward']:.1f} ms = matmuls {t['matmuls']:.1f}"
          f" + attention {t['attention']:.1f} + rest {t['rest']:.1f}")
