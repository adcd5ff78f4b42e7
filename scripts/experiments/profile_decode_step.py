"""Issue 18: `torch.profiler` over one real decode step, replayed.
    .venv/bin/python scripts/experiments/profile_decode_step.py float32 16
    .venv/bin/python scripts/experiments/profile_decode_step.py bfloat16 prompt

Captures a decode step of B sequences at ~128 tokens of context from the engine
(`captured_steps.py`), or with "prompt" a step that carries a new 40-token prompt beside
15 decodes (55 rows), prints its median wall time over 20 replays, then the profiler's
table (self CPU time per op) over 10 more (its first 25 rows; `ROWS=40` for more)."""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from captured_steps import decode_batches, median_ms, prompt_beside_decodes, replay  # this folder
from minillm import LLM


def main(dtype: str, batch_size: str) -> None:
    torch.set_num_threads(2)
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype)
    batch = (prompt_beside_decodes(llm) if batch_size == "prompt"
             else decode_batches(llm, sizes=(int(batch_size),))[int(batch_size)])
    runner = llm.llm_engine.runner

    def forward():
        return replay(runner, batch)
    for _ in range(5):
        forward()
    print(f"median step: {median_ms(forward, 20):.1f} ms")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            forward()
    rows = int(os.environ.get("ROWS", 25))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32", sys.argv[2] if len(sys.argv) > 2 else "16")
