"""Issue 18: are vLLM's CPU matmuls faster than minillm's? (docs/performance.md)
Run with vLLM's virtualenv, whose torch is the same 2.13.0:
    /tmp/vllm-venv/bin/python scripts/experiments/matmul_vs_vllm.py

The 120 layer matmuls of one SmolLM2-135M step (random weights, real shapes) at 1-64 rows,
three ways alternating in one process: `F.linear`, minillm's packed oneDNN call
(`minillm_cpu/packed_linear.py`), and vLLM's `onednn_mm` handles. Median of 9 rounds, ms.
Shapes and timer: `matmul_rows.py` (this folder; it imports only torch)."""
import torch
import torch.nn.functional as F
import vllm._custom_ops as ops

from matmul_rows import layer_weights, median_step_ms, packed_call      # this folder


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    for dtype in (torch.float32, torch.bfloat16):
        weights = layer_weights(dtype)
        handles = [ops.create_onednn_mm(w.t(), 32) for w in weights]
        calls = {"F.linear": lambda j, x: F.linear(x, weights[j]),
                 "minillm packed": packed_call(weights),
                 "vLLM onednn_mm": lambda j, x: ops.onednn_mm(handles[j], x, None)}
        for rows in (1, 16, 53, 64):
            ms = median_step_ms(calls, weights, rows, rounds=9)
            print(str(dtype)[6:], rows, "  ".join(f"{k} {v:.1f}" for k, v in ms.items()), flush=True)


if __name__ == "__main__":
    main()
