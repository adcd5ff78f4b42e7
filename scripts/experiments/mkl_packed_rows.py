"""docs/performance.md, change 8: MKL's own packed fp32 GEMM against the oneDNN packed copy.
    .venv/bin/python scripts/experiments/mkl_packed_rows.py

The 120 layer matmuls of a step (random weights of SmolLM2's shapes, `matmul_rows.py`),
2 threads, median of 9 alternating rounds, ms: `F.linear` (MKL), `x @ Wᵀ` on a
pre-transposed copy, minillm's oneDNN packed call, and `torch.ops.mkl._mkl_linear` with
a copy packed by `_mkl_reorder_linear_weight` for exactly that many rows. PyTorch's
`mkl_linear` multiplies by the packed copy only when the input has the packed row
count (else it calls plain `F.linear`), so the script also times fewer rows *padded*
with zero rows up to a copy packed for 16, and prints how far the padded result is
from `F.linear` on the unpadded rows."""
import sys

import torch
import torch.nn.functional as F

from matmul_rows import layer_weights, median_step_ms, packed_call          # this folder

EXACT_ROWS = (4, 8, 16, 32, 53, 64)
PAD_TO = 16


def mkl_packed(weights, rows: int):
    """call(j, x) through MKL copies packed for exactly `rows` rows."""
    packed = [torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for w in weights]
    return lambda j, x: torch.ops.mkl._mkl_linear(x, packed[j], weights[j], None, rows)


def padded_to(weights, rows: int):
    """call(j, x) for x of ≤ `rows` rows: zero rows appended, MKL packed copy, cut back."""
    full = mkl_packed(weights, rows)

    def call(j, x):
        x_pad = x.new_zeros(rows, x.shape[1])
        x_pad[:x.shape[0]] = x
        return full(j, x_pad)[:x.shape[0]]
    return call


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    weights = layer_weights(torch.float32)
    transposed = [w.t().contiguous() for w in weights]
    onednn = packed_call(weights)
    for rows in EXACT_ROWS:
        calls = {"F.linear": lambda j, x: F.linear(x, weights[j]),
                 "x @ W.T (pre-transposed)": lambda j, x: x @ transposed[j],
                 "oneDNN packed": onednn, f"MKL packed for {rows}": mkl_packed(weights, rows)}
        times = median_step_ms(calls, weights, rows, 9)
        print(f"{rows:3d} rows: " + ", ".join(f"{n} {t:.1f} ms" for n, t in times.items()), flush=True)
    padded = padded_to(weights, PAD_TO)
    for rows in (1, 4, 8, 12):
        x = torch.randn(rows, 576)
        diff = (padded(0, x) - F.linear(x, weights[0])).abs().max().item()
        calls = {"F.linear": lambda j, x: F.linear(x, weights[j]), "oneDNN packed": onednn,
                 f"MKL packed for {PAD_TO}, padded": padded}
        times = median_step_ms(calls, weights, rows, 9)
        print(f"{rows:3d} rows: " + ", ".join(f"{n} {t:.1f} ms" for n, t in times.items())
              + f"; padded vs F.linear max diff {diff:.1e}", flush=True)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    main()
