"""Issue 18: does the work between two matmuls slow down because a matmul streamed its weights?
    .venv/bin/python scripts/experiments/weight_stream_pollution.py [attention|none]

Replays a batch-16 decode step (`captured_steps.py`) with every weight matmul replaced
by a fake that returns the real output computed once, so the matmuls cost nothing but a
lookup. In mode "quiet" that is all; in mode "stream" the fake first reads a private
copy of that matmul's weight matrix (`.sum()`), streaming as many bytes through the
caches as the real matmul does. Both modes alternate, 10 rounds; printed: the median
forward pass minus the time inside the fakes — what the norms, RoPE, SiLU·up, residual
adds, Python (and, with "attention", the attention backend; "none" replaces it by a
no-op) cost when they run after a quiet call and after a weight stream."""
import sys
import time

import torch

from captured_steps import decode_batches                          # this folder
import minillm.model.llama as model_module
import minillm_cpu.packed_linear as packed_linear
from minillm import LLM


class NoAttention:
    name = "none"

    def __call__(self, q, k, v, k_cache, v_cache, meta, scale):
        return q


def main(attention: str, rounds: int = 10) -> None:
    torch.set_num_threads(2)
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12)
    batch = decode_batches(llm, sizes=(16,))[16]
    runner = llm.llm_engine.runner
    backend = runner.backend if attention == "attention" else NoAttention()
    linear, outputs, copies = packed_linear.linear, {}, {}
    state = {"mode": "quiet", "inside": 0.0}

    def fake_linear(x, weight, bias=None, packed=None):
        start = time.perf_counter()
        key = (x.shape[0], weight.data_ptr())
        if key not in outputs:
            outputs[key] = linear(x, weight, bias, packed)
        if state["mode"] == "stream":               # read as many bytes as the matmul would
            copies.setdefault(weight.data_ptr(), weight.clone()).sum()
        state["inside"] += time.perf_counter() - start
        return outputs[key]

    def forward():
        batch.meta.scratch.clear()
        state["inside"] = 0.0
        start = time.perf_counter()
        runner.model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                     batch.logits_indices, backend)
        return time.perf_counter() - start - state["inside"]
    model_module.linear = packed_linear.linear = fake_linear
    try:
        results = {"quiet": [], "stream": []}
        for mode in results:                         # warm-up: outputs and copies made
            state["mode"] = mode
            forward(), forward()
        for r in range(rounds):
            for mode in (("quiet", "stream") if r % 2 == 0 else ("stream", "quiet")):
                state["mode"] = mode
                results[mode].append(forward())
    finally:
        model_module.linear = packed_linear.linear = linear
    for mode, times in results.items():
        times.sort()
        print(f"attention {attention}, {mode:6s}: forward minus the matmuls' stand-ins "
              f"{1e3 * times[len(times) // 2]:.2f} ms (fastest {1e3 * times[0]:.2f})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "none")
