"""Issue 18: are vLLM's CPU matmuls faster than minillm's? (minillm/PERFORMANCE.md)
Run with vLLM's virtualenv, whose torch is the same 2.13.0:
    /tmp/vllm-venv/bin/python scripts/experiments/matmul_vs_vllm.py

The 120 layer matmuls of one SmolLM2-135M step (random weights, real shapes) at 1-64 rows,
three ways alternating in one process: `F.linear`, minillm's packed oneDNN call
(`minillm/packed_linear.py`), and vLLM's `onednn_mm` handles. Median of 9 rounds, ms."""
import torch, time, sys
import vllm._custom_ops as ops
torch.manual_seed(0); torch.set_num_threads(2)
layers = [(960,576),(576,576),(3072,576),(576,1536)]
res = {}
for dtype in (torch.float32, torch.bfloat16):
    ws = [torch.randn(o,i,dtype=dtype)*0.02 for _ in range(30) for (o,i) in layers]
    ours = [torch.ops.mkldnn._reorder_linear_weight(w,16) for w in ws]
    theirs = [ops.create_onednn_mm(w.t(), 32) for w in ws]
    for rows in (1, 16, 53, 64):
        xs = {i: torch.randn(rows,i,dtype=dtype) for i in (576,1536)}
        fns = {"F.linear": lambda j, x: torch.nn.functional.linear(x, ws[j]),
               "minillm packed": lambda j, x: torch.ops.mkldnn._linear_pointwise(x, ours[j], None, "none", [], ""),
               "vLLM onednn_mm": lambda j, x: ops.onednn_mm(theirs[j], x, None)}
        times = {k: [] for k in fns}
        for r in range(9):
            for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                t = time.perf_counter()
                for j, w in enumerate(ws): fns[name](j, xs[w.shape[1]])
                times[name].append(time.perf_counter() - t)
        print(str(dtype)[6:], rows, "  ".join(f"{k} {sorted(v)[4]*1e3:.1f}" for k, v in times.items()), flush=True)
