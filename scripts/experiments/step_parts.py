"""Issue 18: a real batch-16 decode step split into matmuls, attention and the rest.
    .venv/bin/python scripts/experiments/step_parts.py float32

Replays one decode step captured from the engine (`captured_steps.py`; 16 sequences at
~128 tokens of context) and times, alternating over 6 rounds (median of 8 calls each,
then the median round, ms): the whole forward pass; the same with attention replaced by
a backend that returns its queries (so attention's cost is the difference); the model's
120 layer matmuls (`Linear` modules) on 16 random rows; and the tied `lm_head` product.
What is left of the no-attention step after the matmuls is the element-wise work
(norms, RoPE, SiLU·mul, residual adds, the KV write) and Python."""
import sys

import torch

from captured_steps import decode_batches, median_ms, replay            # this folder
from inductor_paged_decode import NoAttention
from minillm import LLM
from benchmarks import ab
from minillm_cpu.packed_linear import Linear, linear


def parts(dtype_name: str, rounds: int = 6) -> dict[str, float]:
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype_name)
    batch = decode_batches(llm, sizes=(16,))[16]
    runner = llm.llm_engine.runner
    model = runner.model

    def forward(backend):
        return replay(runner, batch, backend)
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    rows = {n: torch.randn(16, n, dtype=getattr(torch, dtype_name)) for n in (576, 1536)}
    calls = {"step": lambda: forward(runner.backend),
             "step without attention": lambda: forward(NoAttention()),
             "120 layer matmuls": lambda: [m(rows[m.weight.shape[1]]) for m in linears],
             "lm_head": lambda: linear(rows[576], model.embed_tokens.weight,
                                       packed=model.lm_head_packed)}
    for call in calls.values():
        for _ in range(3):
            call()
    runners = {name: (lambda call=call: {"ms": median_ms(call, 8)}) for name, call in calls.items()}
    return {name: m["ms"] for name, m in ab.medians(ab.alternate(runners, rounds)).items()}


if __name__ == "__main__":
    torch.set_num_threads(2)
    dtype_name = sys.argv[1] if len(sys.argv) > 1 else "float32"
    t = parts(dtype_name)
    print(dtype_name, {name: round(ms, 1) for name, ms in t.items()})
    print(f"attention {t['step'] - t['step without attention']:.1f} ms, everything else "
          f"{t['step without attention'] - t['120 layer matmuls'] - t['lm_head']:.1f} ms")
