"""Issue 18: does the row count a weight is packed for matter to oneDNN's fp32 kernel?
    .venv/bin/python scripts/experiments/onednn_rows_hint.py

`PackedWeight` packs every weight with `torch.ops.mkldnn._reorder_linear_weight(w, 16)`:
the 16 is a hint, the row count oneDNN picks its blocked layout for. A step that
carries a new prompt multiplies ~55 rows, a decode step of the full batch 16, a lone
decode 1. This times the 120 layer matmuls of a step (`matmul_rows.py`'s shapes and
alternating median timer) through copies packed with hints 1, 16 and 64, at 1, 16 and
53 rows, 2 threads, median of 9 alternating rounds. If another hint were faster at
prompt-step row counts, a second copy for those steps might pay for its memory."""
import torch

from matmul_rows import layer_weights, median_step_ms               # this folder

HINTS = (1, 16, 64)
ROWS = (1, 16, 53)


def packed_with_hint(weights, hint: int):
    """call(j, x) through oneDNN copies packed with this row hint."""
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, hint) for w in weights]
    return lambda j, x: torch.ops.mkldnn._linear_pointwise(x, packed[j], None, "none", [], "")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    weights = layer_weights(torch.float32)
    calls = {f"hint {hint}": packed_with_hint(weights, hint) for hint in HINTS}
    for rows in ROWS:
        ms = median_step_ms(calls, weights, rows, rounds=9)
        print(f"{rows:3d} rows: " + ", ".join(f"{name} {t:5.1f} ms" for name, t in ms.items()),
              flush=True)


if __name__ == "__main__":
    main()
