"""Issue 18: bf16 weight matmuls — which PyTorch entry point, and what a call costs.
    .venv/bin/python scripts/experiments/bf16_matmul_calls.py

The 120 layer matmuls of a step (random bf16 weights of SmolLM2's shapes, and the
alternating timer, of `matmul_rows.py`) at 1, 16 and 53 rows, 2 threads, median of 15
rounds (hot: the bf16 weights, 212 MB, may stay in a large L3): minillm's packed oneDNN
call (`matmul_rows.packed_call`), `F.linear`, and `torch.mm` on a pre-transposed copy.
Then the cost of one call where the arithmetic is nothing (16 × 64 × 64), mean of 2,000
calls after 200."""
import time

import torch
import torch.nn.functional as F

from matmul_rows import layer_weights, median_step_ms, packed_call      # this folder


def entry_points(weights) -> dict:
    """{name: call(j, x) = x @ weights[j]ᵀ} for the three ways of calling a bf16 matmul."""
    transposed = [w.t().contiguous() for w in weights]
    return {"packed": packed_call(weights),
            "F.linear": lambda j, x: F.linear(x, weights[j]),
            "mm(Wt)": lambda j, x: torch.mm(x, transposed[j])}


def call_us(call) -> float:
    """Mean µs of call(0, x) for a 16 × 64 input, after a warm-up."""
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    for _ in range(200):
        call(0, x)
    start = time.perf_counter()
    for _ in range(2000):
        call(0, x)
    return (time.perf_counter() - start) / 2000 * 1e6


def main() -> None:
    torch.set_num_threads(2)
    weights = layer_weights(torch.bfloat16)
    calls = entry_points(weights)
    for rows in (1, 16, 53):
        ms = median_step_ms(calls, weights, rows, rounds=15)
        print(f"{rows:3d} rows, 120 matmuls (ms): "
              + ", ".join(f"{name} {t:.2f}" for name, t in ms.items()))
    tiny = entry_points([torch.randn(64, 64, dtype=torch.bfloat16)])
    print("one 16 x 64 x 64 call (µs): "
          + ", ".join(f"{name} {call_us(call):.1f}" for name, call in tiny.items()))


if __name__ == "__main__":
    main()
