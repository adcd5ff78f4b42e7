"""Issue 18, tried and not kept (docs/performance.md). Run: .venv/bin/python scripts/experiments/flex_paged_attention.py

Paged decode with FlexAttention reading KV blocks in place: all decodes as one batch-1
problem, one query row per sequence, K/V = the whole physical cache; the BlockMask lists
each query's physical blocks (kv_indices), mask_mod hides slots past the sequence end."""
import time, json, os
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention, BlockMask
torch.manual_seed(0); torch.set_num_threads(2)
B, HQ, HKV, D, L, BS = 16, 9, 3, 64, 256, 16
nblocks = B * L // BS
k_cache = torch.randn(nblocks, BS, HKV, D); v_cache = torch.randn(nblocks, BS, HKV, D)
tables = torch.randperm(nblocks).view(B, L // BS)
seq_lens = torch.randint(L - 40, L + 1, (B,))
q = torch.randn(B, HQ, 1, D)

def gathered():
    k = k_cache[tables].reshape(B, L, HKV, D).transpose(1, 2)
    v = v_cache[tables].reshape(B, L, HKV, D).transpose(1, 2)
    mask = torch.arange(L)[None, :] < seq_lens[:, None]            # [B, L]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :], enable_gqa=True)

# physical layout as flex wants it: [1, HKV, nblocks*BS, D] (a view, no copy if cache is [HKV, slots, D])
k_phys = k_cache.permute(2, 0, 1, 3).reshape(1, HKV, nblocks * BS, D)
v_phys = v_cache.permute(2, 0, 1, 3).reshape(1, HKV, nblocks * BS, D)
q_rows = q.permute(2, 1, 0, 3)                                      # [1, HQ, B, D]
slot_pos = torch.empty(nblocks * BS, dtype=torch.long)              # position held by each slot
for b in range(B):
    for j, blk in enumerate(tables[b].tolist()):
        slot_pos[blk * BS:(blk + 1) * BS] = torch.arange(j * BS, (j + 1) * BS)
def mask_mod(b, h, q_idx, kv_idx):
    return slot_pos[kv_idx] < seq_lens[q_idx]
QB = 1
kv_num = ((seq_lens + BS - 1) // BS).to(torch.int32).view(1, 1, B)
kv_idx = torch.zeros(1, 1, B, nblocks, dtype=torch.int32)
kv_idx[0, 0, :, :L // BS] = tables.to(torch.int32)   # each row: its blocks, then padding
res = {"load_avg_start": os.getloadavg()}
try:
    bm = BlockMask.from_kv_blocks(kv_num, kv_idx, BLOCK_SIZE=(QB, BS), mask_mod=mask_mod,
                                  seq_lengths=(B, nblocks * BS))
    t0 = time.perf_counter()
    flex = torch.compile(flex_attention, dynamic=False)
    out = flex(q_rows, k_phys, v_phys, block_mask=bm, enable_gqa=True)
    res["compile_s"] = time.perf_counter() - t0
    out = out.permute(2, 1, 0, 3)                                   # [B, HQ, 1, D]
    res["max_abs_err"] = (out - gathered()).abs().max().item()
    def best(fn, n=50):
        for _ in range(5): fn()
        ts = []
        for _ in range(n):
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
        return round(min(ts) * 1e3, 3), round(sorted(ts)[n // 2] * 1e3, 3)
    res["flex_paged_in_place_ms"] = best(lambda: flex(q_rows, k_phys, v_phys, block_mask=bm, enable_gqa=True))
    res["gather_plus_sdpa_ms"] = best(gathered)
except Exception as e:
    import traceback; res["error"] = f"{type(e).__name__}: {str(e)[:1500]}"; traceback.print_exc()
res["load_avg_end"] = os.getloadavg()
print(json.dumps(res, indent=1))
