"""docs/performance.md, changes 5 and 5b. Run:
    .venv/bin/python scripts/experiments/matmul_rows.py [ROWS ...]

The 120 layer matmuls of one SmolLM2-135M step (random weights of its shapes: fused QKV
960×576, output 576×576, fused gate/up 3072×576, down 576×1536; 30 layers) at a few
small row counts (1-6 and 8, or the ones given), through `F.linear` (MKL in fp32, oneDNN
in bf16) and through the packed oneDNN copy `PackedWeight` makes. Rounds alternate between the two in one
process (order reversed every other round); the median of 11 is printed. Where
`F.linear` wins is where `PackedWeight.min_rows_for` sends the call (on Intel CPUs only;
elsewhere every row count is packed, as measured on two AMD machines).

Only torch is imported; `matmul_few_rows.py` and `mkl_packed_rows.py` reuse the shapes
and the timer from here.
"""
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]      # [out, in] per layer
ROWS = (1, 2, 3, 4, 5, 6, 8)


def layer_weights(dtype) -> list[torch.Tensor]:
    """The 120 layer weight matrices of a step, random, in SmolLM2's shapes."""
    return [torch.randn(o, i, dtype=dtype) * 0.02 for _ in range(30) for o, i in SHAPES]


def packed_call(weights):
    """minillm's packed oneDNN call (`minillm_cpu/packed_linear.py`) as call(j, x)."""
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, 16) for w in weights]
    return lambda j, x: torch.ops.mkldnn._linear_pointwise(x, packed[j], None, "none", [], "")


def median_step_ms(calls: dict, weights, rows: int, rounds: int) -> dict[str, float]:
    """{name: median ms of one step's matmuls} for each call(j, x) = x @ weights[j]ᵀ,
    the calls alternating round by round."""
    inputs = {i: torch.randn(rows, i, dtype=weights[0].dtype) for i in (576, 1536)}
    times = {name: [] for name in calls}
    for r in range(rounds):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            start = time.perf_counter()
            for j, w in enumerate(weights):
                calls[name](j, inputs[w.shape[1]])
            times[name].append(time.perf_counter() - start)
    return {name: sorted(t)[rounds // 2] * 1e3 for name, t in times.items()}


def main(row_counts=ROWS):
    torch.manual_seed(0)
    torch.set_num_threads(2)
    for dtype in (torch.float32, torch.bfloat16):
        weights = layer_weights(dtype)
        calls = {"F.linear": lambda j, x: F.linear(x, weights[j]), "packed": packed_call(weights)}
        for rows in row_counts:
            ms = median_step_ms(calls, weights, rows, rounds=11)
            print(f"{str(dtype):15s} {rows} rows: F.linear {ms['F.linear']:5.1f} ms, "
                  f"packed {ms['packed']:5.1f} ms", flush=True)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    main(tuple(int(arg) for arg in sys.argv[1:]) or ROWS)
