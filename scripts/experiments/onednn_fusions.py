"""Issue 18: two oneDNN knobs of the packed matmul, measured (neither kept).
    .venv/bin/python scripts/experiments/onednn_fusions.py

1. Post-ops: `torch.ops.mkldnn._linear_pointwise` can fuse an element-wise op into the
   matmul's output. The 30 layers' output projection plus the residual add, separate
   against fused (`_linear_pointwise.binary(x, residual, W, None, "add")`), and the
   MLP's fused gate/up matmul + `silu(gate) * up` against two matmuls with the SiLU and
   the multiply as post-ops ("swish", then binary "mul"). fp32, random weights of
   SmolLM2's shapes, median of alternating rounds, µs per step.
2. `PackedWeight.ROWS_HINT`: the row count oneDNN tiles the packed weight for. The 120
   layer matmuls (`matmul_rows.py`) packed for 1, 4, 16 and 64 rows, at 1-55 rows."""
import torch
import torch.nn.functional as F

from captured_steps import median_ms                     # this folder
from matmul_rows import layer_weights, median_step_ms
from benchmarks import ab

LAYERS, HIDDEN, INTER = 30, 576, 1536
pack = torch.ops.mkldnn._reorder_linear_weight
linear = torch.ops.mkldnn._linear_pointwise


def post_ops() -> None:
    w_o = [torch.randn(HIDDEN, HIDDEN) * 0.02 for _ in range(LAYERS)]
    w_gu = [torch.randn(2 * INTER, HIDDEN) * 0.02 for _ in range(LAYERS)]
    p_o, p_gu = [pack(w, 16) for w in w_o], [pack(w, 16) for w in w_gu]
    p_gate = [pack(w[:INTER].contiguous(), 16) for w in w_gu]
    p_up = [pack(w[INTER:].contiguous(), 16) for w in w_gu]
    for rows in (1, 16, 55):
        x, residual = torch.randn(rows, HIDDEN), torch.randn(rows, HIDDEN)

        def mlp_fused_weight():
            for p in p_gu:
                gate, up = linear(x, p, None, "none", [], "").split(INTER, dim=-1)
                F.silu(gate) * up
        calls = {
            "o_proj, then + residual": lambda: [residual + linear(x, p, None, "none", [], "") for p in p_o],
            "o_proj with the add fused": lambda: [linear.binary(x, residual, p, None, "add") for p in p_o],
            "gate/up, then silu·up": mlp_fused_weight,
            "gate (swish) and up (mul) post-ops": lambda: [
                linear.binary(x, linear(x, g, None, "swish", [], ""), u, None, "mul")
                for g, u in zip(p_gate, p_up)],
        }
        runners = {name: (lambda c=c: {"us": 1e3 * median_ms(c, 20)}) for name, c in calls.items()}
        t = {name: m["us"] for name, m in ab.medians(ab.alternate(runners, 7)).items()}
        print(f"  {rows:2d} rows: " + "; ".join(f"{name} {us:.0f} µs" for name, us in t.items()), flush=True)


def rows_hint() -> None:
    weights = layer_weights(torch.float32)
    calls = {}
    for hint in (1, 4, 16, 64):
        packed = [pack(w, hint) for w in weights]
        calls[f"hint {hint}"] = lambda j, x, p=packed: linear(x, p[j], None, "none", [], "")
    for rows in (1, 3, 8, 16, 55):
        ms = median_step_ms(calls, weights, rows, rounds=9)
        print(f"  {rows:2d} rows: " + ", ".join(f"{name} {v:.1f} ms" for name, v in ms.items()), flush=True)


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.manual_seed(0)
    print("post-ops (fp32, 30 layers):")
    post_ops()
    print("ROWS_HINT (fp32, the 120 layer matmuls):")
    rows_hint()
