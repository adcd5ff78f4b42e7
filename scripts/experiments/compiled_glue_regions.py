"""Issue 18: the element-wise work between the matmuls compiled, region by region.
    .venv/bin/python scripts/experiments/compiled_glue_regions.py [float32|bfloat16] [16,4,1]

Between two weight matmuls a decoder layer runs short chains of element-wise ops: RoPE
after the QKV projection, the residual add and the next RMSNorm after the output and down
projections, SiLU·up after gate/up. Here each chain is one `torch.compile`d function
(inductor, dynamic shapes: one graph for every row count) while the matmuls and the
attention backend stay eager, so nothing is frozen and the compiled code is cached on
disk. Replayed decode steps (`captured_steps.py`), eager forward pass against the
regions, 12 alternating rounds (median of 5 passes each); printed per batch: medians,
the median per-round ratio eager / regions, and the largest logit difference."""
import sys
import time

import torch
import torch.nn.functional as F

from captured_steps import decode_batches                          # this folder
from minillm import LLM
from minillm_cpu.packed_linear import linear


def make_regions(eps: float, num_heads: int, num_kv_heads: int):
    def rope(qkv, cos, sin_signed):                 # [T, Hq + 2·Hkv, D] → q, k, v
        qk = qkv[:, :num_heads + num_kv_heads]
        qk = qk * cos + qk.roll(qk.shape[-1] // 2, dims=-1) * sin_signed
        return qk[:, :num_heads], qk[:, num_heads:], qkv[:, num_heads + num_kv_heads:]

    def add_norm(h, delta, weight):                 # residual add, then the next RMSNorm
        h = h + delta
        return h, F.rms_norm(h, weight.shape, weight, eps)

    def silu_mul(gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up
    return [torch.compile(f, dynamic=True) for f in (rope, add_norm, silu_mul)]


def regions_forward(model):
    cfg = model.config
    rope, add_norm, silu_mul = make_regions(cfg.rms_norm_eps, cfg.num_attention_heads,
                                            cfg.num_key_value_heads)
    hidden, heads = cfg.hidden_size, cfg.num_attention_heads + 2 * cfg.num_key_value_heads

    @torch.inference_mode()
    def forward(input_ids, positions, kv_caches, meta, logits_indices, backend):
        h = model.embed_tokens(input_ids)
        cos_sin = model.rope.cos_sin(positions, h.dtype)
        layers = model.layers
        x = layers[0].input_norm(h)
        for i, (layer, (k_cache, v_cache)) in enumerate(zip(layers, kv_caches)):
            attn, T = layer.attn, x.shape[0]
            q, k, v = rope(attn.qkv_proj(x).view(T, heads, -1), *cos_sin)
            o = backend(q, k, v, k_cache, v_cache, meta, attn.scale)
            h, x2 = add_norm(h, attn.o_proj(o.reshape(T, -1)), layer.post_attention_norm.weight)
            down = layer.mlp.down_proj(silu_mul(layer.mlp.gate_up_proj(x2)))
            following = layers[i + 1].input_norm.weight if i + 1 < len(layers) else model.norm.weight
            h, x = add_norm(h, down, following)
        return linear(x[logits_indices], model.embed_tokens.weight,
                      packed=model.lm_head_packed).float()
    assert hidden == model.embed_tokens.weight.shape[1]
    return forward


def main(dtype_name: str, sizes: tuple[int, ...], rounds: int = 12) -> None:
    torch.set_num_threads(2)
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype_name)
    batches = decode_batches(llm, sizes=sizes)
    runner = llm.llm_engine.runner
    contenders = {"eager": runner.model, "regions": regions_forward(runner.model)}

    def run(fn, batch):
        batch.meta.scratch.clear()
        return fn(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                  batch.logits_indices, runner.backend)
    start = time.perf_counter()
    for batch in batches.values():
        run(contenders["regions"], batch)
    print(f"first calls (compilation): {time.perf_counter() - start:.1f} s")
    for size, batch in sorted(batches.items()):
        diff = (run(contenders["eager"], batch) - run(contenders["regions"], batch)).abs().max()
        times = {name: [] for name in contenders}
        for r in range(rounds):
            for name in (list(contenders) if r % 2 == 0 else list(contenders)[::-1]):
                passes = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    run(contenders[name], batch)
                    passes.append(time.perf_counter() - t0)
                times[name].append(sorted(passes)[2])
        ratios = sorted(a / b for a, b in zip(times["eager"], times["regions"]))
        med = {name: 1e3 * sorted(t)[len(t) // 2] for name, t in times.items()}
        print(f"{dtype_name} batch {size}: eager {med['eager']:.1f} ms, regions "
              f"{med['regions']:.1f} ms, eager / regions {ratios[len(ratios) // 2]:.3f} "
              f"(rounds {ratios[0]:.2f}-{ratios[-1]:.2f}), largest logit difference {diff:.1e}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32",
         tuple(int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "16,4,1").split(",")))
