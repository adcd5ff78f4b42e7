"""Issue 18: what one call of the packed matmul costs besides the multiplication.
    .venv/bin/python scripts/experiments/onednn_call_overhead.py
    ONEDNN_VERBOSE=all .venv/bin/python scripts/experiments/onednn_call_overhead.py 2>&1 | grep exec

`torch.ops.mkldnn._linear_pointwise` (what `packed_linear.py` calls) on a product so
small that the arithmetic takes ~1 µs (1 or 16 rows × 64 × 64), against `F.linear` and
an element-wise `add` of the same input — median µs of 3,000 calls, fp32 and bf16, 1 and
2 threads, and one layer-sized product (16 × 576 → 1728). oneDNN's own log
(`ONEDNN_VERBOSE=all`) prints the time of each kernel execution (`exec`) and of each
primitive look-up (`create:cache_hit`); what the median adds on top is PyTorch's and
ideep's work per call."""
import time

import torch
import torch.nn.functional as F


def median_us(fn, n: int = 3000) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[n // 2] * 1e6


def main() -> None:
    shapes = [(1, 64, 64), (16, 64, 64), (16, 576, 1728)]
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            for rows, k, n in shapes:
                w, x = torch.randn(n, k, dtype=dtype), torch.randn(rows, k, dtype=dtype)
                packed = torch.ops.mkldnn._reorder_linear_weight(w, 16)
                with torch.inference_mode():
                    t_packed = median_us(lambda: torch.ops.mkldnn._linear_pointwise(
                        x, packed, None, "none", [], ""))
                    t_linear = median_us(lambda: F.linear(x, w))
                    t_add = median_us(lambda: torch.add(x, 1.0))
                print(f"{threads} thread(s), {str(dtype)[6:]:8s} {rows:2d} × {k} → {n}: packed "
                      f"{t_packed:6.1f} µs, F.linear {t_linear:6.1f} µs, add {t_add:4.1f} µs", flush=True)


if __name__ == "__main__":
    main()
