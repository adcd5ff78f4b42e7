"""minillm's own Llama-family forward pass, on the flat token layout.

Input is one step's flat batch (see `batch.py`): `T` tokens from many sequences side by
side, no padding. Every op except attention is **token-wise** — it treats each of the
`T` rows on its own — so it runs on the whole flat batch at once:

    embed  →  30 × [ h = h + attention(RMSNorm(h))        (RoPE on queries and keys)
                     h = h + MLP(RMSNorm(h)) ]            (SwiGLU: down(SiLU(gate)·up))
           →  RMSNorm → lm_head  (only at the rows that sample)

Details that matter for exactness against transformers:

* **RMSNorm** computes in fp32 and multiplies by the weight after casting back.
* **RoPE** rotates pairs (i, i + D/2) of each head by angle `position · θ^(-2i/D)`
  ("rotate half" layout, the one Hugging Face Llama weights use). The angles' cos/sin
  rows are looked up once per step and shared by every layer.
* **GQA**: `num_heads` query heads share `num_kv_heads` key/value heads (SmolLM2: 9
  and 3 — three query heads per K/V head), so the KV cache is 3× smaller.
* Q, K, V projections are fused into one matmul, and so are gate and up: one big
  matmul reads the input once (weights are concatenated when loading).
* Embeddings may be tied: `lm_head` then shares the embedding matrix.

Attention is the only op that needs to know which row belongs to which sequence; the
model calls it as `attention(q, k, v, k_cache, v_cache, scale)`, where `attention` is
this step's `StepAttention` (`minillm/attention/base.py`). Everything else here is
plain PyTorch, as written. An executor may swap modules for faster ones of the same
meaning when the model is loaded (`executor.py`); this file does not know about it.

Weights are copied from a transformers `LlamaForCausalLM`; the code is ours.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minillm.model.loader import check_llama_config


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:       # [T, H] → [T, H]
        """weight · x / sqrt(mean(x²) + eps), each row on its own.

        `F.rms_norm` is that formula in one call (PyTorch computes it with the same
        ops, so the result is the written-out formula's to the bit: tests/test_forward.py).
        In fp32 it multiplies by the weight too; in a lower precision the norm is taken
        in fp32 and the weight multiplies *after* casting back, as transformers does."""
        if x.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class Rotation:
    """One step's RoPE angles, looked up once and used by every layer: `rope(x)`
    rotates x [T, heads, D], row t by the angles of its position.

    With x = (x₁ | x₂), its two halves, the rotation is
    (x₁·cos − x₂·sin | x₂·cos + x₁·sin) — "rotate half". `x.roll(D/2)` is (x₂ | x₁), and
    `sin_signed` is (−sin | sin), so the second term is one product: three ops and a
    roll, and exactly the same roundings as writing the halves out."""

    def __init__(self, cos: torch.Tensor, sin_signed: torch.Tensor):
        self.cos, self.sin_signed = cos, sin_signed                # [T, 1, D] each

    def __call__(self, x: torch.Tensor) -> torch.Tensor:         # [T, heads, D]
        return x * self.cos + x.roll(x.shape[-1] // 2, dims=-1) * self.sin_signed


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin for every position up to `max_positions`; called with a
    step's positions, it returns that step's `Rotation`.

    `sin` is stored with its first half negated ("signed"), which is what `Rotation`
    multiplies by (see there)."""

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)              # [P, D]
        sin_signed = angles.sin()
        sin_signed[:, :head_dim // 2].neg_()                      # −sin | sin
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin_signed", sin_signed, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> Rotation:
        """The rows of this step's positions [T], ready to broadcast over heads."""
        return Rotation(self.cos[positions].unsqueeze(1).to(dtype),          # [T, 1, D]
                        self.sin_signed[positions].unsqueeze(1).to(dtype))


class Attention(nn.Module):
    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, bias: bool):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_size, self.kv_size = num_heads * head_dim, num_kv_heads * head_dim
        self.qkv_proj = nn.Linear(hidden, self.q_size + 2 * self.kv_size, bias=bias)
        self.o_proj = nn.Linear(self.q_size, hidden, bias=bias)
        self.scale = head_dim ** -0.5

    def forward(self, x, rope: Rotation, layer_cache, attention) -> torch.Tensor:
        """x [T, H] → [T, H]; `attention`: this step's (see the module docstring)."""
        T, Hq, Hkv, D = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x).view(T, Hq + 2 * Hkv, D)          # [T, Hq + 2·Hkv, D]
        qk = rope(qkv[:, :Hq + Hkv])        # queries and keys are neighbours: one rotation
        q, k = qk.split([Hq, Hkv], dim=1)                         # [T, Hq, D], [T, Hkv, D]
        v = qkv[:, Hq + Hkv:]                                     # [T, Hkv, D]
        out = attention(q, k, v, *layer_cache, self.scale)        # [T, Hq, D]
        return self.o_proj(out.reshape(T, self.q_size))           # [T, H]


class SiluAndMul(nn.Module):
    """SwiGLU's gate: gate_up [T, 2·I] (gate | up) → SiLU(gate) · up [T, I]."""

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, bias: bool):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=bias)
        self.act = SiluAndMul()
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:           # [T, H] → [T, H]
        return self.down_proj(self.act(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                              head_dim(cfg), bias=getattr(cfg, "attention_bias", False))
        self.post_attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size, bias=getattr(cfg, "mlp_bias", False))

    def forward(self, h, rope, layer_cache, attention):          # h: [T, H], the residual stream
        h = h + self.attn(self.input_norm(h), rope, layer_cache, attention)
        return h + self.mlp(self.post_attention_norm(h))


class DecoderStack(nn.ModuleList):
    """The layers, one after another; each reads and writes its own (K, V) cache."""

    def forward(self, h, rope, kv_caches, attention) -> torch.Tensor:
        for layer, layer_cache in zip(self, kv_caches):
            h = layer(h, rope, layer_cache, attention)
        return h


class LlamaModel(nn.Module):
    """The whole network. Build it with `LlamaModel.from_hf(hf_model)`."""

    def __init__(self, cfg):
        super().__init__()
        check_llama_config(cfg)
        self.config = cfg
        self.num_layers = cfg.num_hidden_layers
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = head_dim(cfg)
        self.vocab_size = cfg.vocab_size
        self.max_positions = cfg.max_position_embeddings
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = RotaryEmbedding(self.head_dim, rope_theta(cfg), cfg.max_position_embeddings)
        self.layers = DecoderStack(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.tied = bool(getattr(cfg, "tie_word_embeddings", False))
        if self.tied:
            self.lm_head.weight = self.embed_tokens.weight       # one matrix, two uses

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches,
                attention, logits_indices: torch.Tensor) -> torch.Tensor:
        """input_ids, positions [T] → logits [len(logits_indices), vocab]."""
        h = self.embed_tokens(input_ids)                          # [T, H]
        rope = self.rotary(positions, h.dtype)                    # this step's angles
        h = self.layers(h, rope, kv_caches, attention)            # [T, H]
        h = self.norm(h[logits_indices])                          # [S, H]: rows that sample
        return self.lm_head(h).float()                            # [S, V]

    @classmethod
    def from_hf(cls, hf_model, dtype: torch.dtype | None = None,
                device: torch.device | str | None = None) -> "LlamaModel":
        """Copy a transformers LlamaForCausalLM's weights into minillm's layout."""
        cfg = hf_model.config
        model = cls(cfg)
        model.load_state_dict(convert_state_dict(hf_model.state_dict(), cfg, model.tied))
        param_dtype = dtype or next(hf_model.parameters()).dtype
        return model.to(device=device or "cpu", dtype=param_dtype).eval()


def convert_state_dict(src: dict, cfg, tied: bool) -> dict:
    """transformers names → minillm names, fusing QKV and gate/up."""
    out = {"embed_tokens.weight": src["model.embed_tokens.weight"],
           "norm.weight": src["model.norm.weight"],
           "lm_head.weight": src["model.embed_tokens.weight" if tied else "lm_head.weight"]}
    for i in range(cfg.num_hidden_layers):
        p, q = f"model.layers.{i}.", f"layers.{i}."
        out[q + "input_norm.weight"] = src[p + "input_layernorm.weight"]
        out[q + "post_attention_norm.weight"] = src[p + "post_attention_layernorm.weight"]
        for kind in ("weight", "bias"):
            parts = [src.get(p + f"self_attn.{n}_proj.{kind}") for n in "qkv"]
            if parts[0] is not None:
                out[q + f"attn.qkv_proj.{kind}"] = torch.cat(parts, dim=0)
            if (o := src.get(p + f"self_attn.o_proj.{kind}")) is not None:
                out[q + f"attn.o_proj.{kind}"] = o
            gate, up = src.get(p + f"mlp.gate_proj.{kind}"), src.get(p + f"mlp.up_proj.{kind}")
            if gate is not None:
                out[q + f"mlp.gate_up_proj.{kind}"] = torch.cat([gate, up], dim=0)
            if (down := src.get(p + f"mlp.down_proj.{kind}")) is not None:
                out[q + f"mlp.down_proj.{kind}"] = down
    return out


def head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", None))
    if theta is None:
        raise ValueError("model config has no rope_theta")
    return float(theta)
