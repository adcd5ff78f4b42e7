"""Issue 18: bf16 weight matmuls — which PyTorch entry point, and what a call costs.
    .venv/bin/python scripts/experiments/bf16_matmul_calls.py

The 120 layer matmuls of a step (random bf16 weights of SmolLM2's shapes, `matmul_rows.py`)
at 1, 16 and 53 rows, 2 threads, median of 15 passes after 5 warm-up passes (hot: the
bf16 weights, 212 MB, may stay in a large L3): minillm's packed oneDNN call
(`_linear_pointwise` on `_reorder_linear_weight`), `F.linear`, and `torch.mm` on a
pre-transposed copy. Then the cost of one call where the arithmetic is nothing
(16 × 64 × 64), mean of 2,000 calls."""
import time

import torch
import torch.nn.functional as F

from matmul_rows import layer_weights                               # this folder

KINDS = ("packed", "F.linear", "mm(Wt)")


def caller(kind: str, weight: torch.Tensor):
    """call(x) computing x @ weightᵀ the `kind` way."""
    if kind == "packed":
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 16)
        return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    if kind == "F.linear":
        return lambda x: F.linear(x, weight)
    transposed = weight.t().contiguous()
    return lambda x: torch.mm(x, transposed)


def step_ms(calls, weights, rows: int) -> float:
    x = torch.randn(rows, 1536, dtype=torch.bfloat16)
    inputs = {576: x[:, :576].contiguous(), 1536: x}

    def one_pass():
        for call, w in zip(calls, weights):
            call(inputs[w.shape[1]])

    for _ in range(5):
        one_pass()
    times = []
    for _ in range(15):
        start = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def call_us(kind: str) -> float:
    x, w = torch.randn(16, 64, dtype=torch.bfloat16), torch.randn(64, 64, dtype=torch.bfloat16)
    call = caller(kind, w)
    for _ in range(200):
        call(x)
    start = time.perf_counter()
    for _ in range(2000):
        call(x)
    return (time.perf_counter() - start) / 2000 * 1e6


def main() -> None:
    torch.set_num_threads(2)
    weights = layer_weights(torch.bfloat16)
    calls = {kind: [caller(kind, w) for w in weights] for kind in KINDS}
    for rows in (1, 16, 53):
        times = ", ".join(f"{kind} {step_ms(calls[kind], weights, rows):.2f}" for kind in KINDS)
        print(f"{rows:3d} rows, 120 matmuls (ms): {times}")
    print("one 16 x 64 x 64 call (µs): " + ", ".join(f"{kind} {call_us(kind):.1f}" for kind in KINDS))


if __name__ == "__main__":
    main()
