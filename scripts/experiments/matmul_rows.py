"""Issue 18, change 5 in minillm/PERFORMANCE.md. Run:
    .venv/bin/python scripts/experiments/matmul_rows.py

The 120 layer matmuls of one SmolLM2-135M step (random weights of its shapes: fused QKV
960×576, output 576×576, fused gate/up 3072×576, down 576×1536; 30 layers) at a few
small row counts, through `F.linear` (MKL in fp32, oneDNN in bf16) and through the
packed oneDNN copy `PackedWeight` makes. Rounds alternate between the two in one
process; the median of 11 is printed. Where `F.linear` wins is where
`PackedWeight.MIN_ROWS` sends the call.
"""
import time

import torch
import torch.nn.functional as F

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]      # [out, in] per layer
ROWS = (1, 2, 3, 4, 5, 6, 8)


def one_step(weights, packed, inputs, through_packed: bool) -> float:
    start = time.perf_counter()
    for w, p in zip(weights, packed):
        x = inputs[w.shape[1]]
        if through_packed:
            torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "")
        else:
            F.linear(x, w)
    return time.perf_counter() - start


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    for dtype in (torch.float32, torch.bfloat16):
        weights = [torch.randn(o, i, dtype=dtype) * 0.02 for _ in range(30) for o, i in SHAPES]
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, 16) for w in weights]
        for rows in ROWS:
            inputs = {i: torch.randn(rows, i, dtype=dtype) for i in (576, 1536)}
            times = {False: [], True: []}
            for _ in range(11):
                for through_packed in times:
                    times[through_packed].append(one_step(weights, packed, inputs, through_packed))
            linear_ms, packed_ms = (sorted(times[k])[5] * 1e3 for k in (False, True))
            print(f"{str(dtype):15s} {rows} rows: F.linear {linear_ms:5.1f} ms, "
                  f"packed {packed_ms:5.1f} ms", flush=True)


if __name__ == "__main__":
    main()
