"""minillm's own Llama-family forward pass, on the flat token layout.

Input is one step's flat batch (see `flat_batch.py`): `T` tokens from many
sequences side by side, no padding. Every op except attention is **token-wise** — it
treats each of the `T` rows on its own — so it runs on the whole flat batch at once:

    embed  →  30 × [ RMSNorm → QKV proj → RoPE → attention → O proj → +residual
                     RMSNorm → gate/up proj → SiLU(gate)·up → down proj → +residual ]
           →  RMSNorm → lm_head  (only at the rows that sample)

Details that matter for exactness against transformers:

* **RMSNorm** computes in fp32 and multiplies by the weight after casting back.
* **RoPE** rotates pairs (i, i + D/2) of each head by angle `position · θ^(-2i/D)`
  ("rotate half" layout, the one Hugging Face Llama weights use).
* **GQA**: `num_heads` query heads share `num_kv_heads` key/value heads (SmolLM2: 9
  and 3 — three query heads per K/V head), so the KV cache is 3× smaller.
* Q, K, V projections are fused into one matmul, and so are gate and up: one big
  matmul reads the input once (weights are concatenated when loading).
* Embeddings may be tied: `lm_head` reuses the embedding matrix.

Speed (`minillm/PERFORMANCE.md` says what each trick bought, and how it was measured):

* RoPE's cos/sin rows are looked up **once per step**, not once per layer, and
  queries and keys are rotated **together** (they sit side by side in the fused QKV
  output).
* On CPU every weight matrix is also kept **pre-packed** (`packed_linear.py`): in
  oneDNN's blocked layout, and in fp32 on an AVX-512 CPU in panels of 16 columns for a
  decode step's 1-16 rows (`minillm/cpu_kernels/matmul.cpp`): the same products,
  arranged for the vector units and the memory's stream.
* Each residual add is done by the norm that follows it (`RMSNorm.add_and_norm`), so a
  layer hands its MLP output to the next layer still to be added. With the "cpp"
  attention backend (the CPU default) those add + norm pairs, RoPE and SiLU·up each run
  as one C++ loop (`minillm/cpu_kernels/`) instead of several PyTorch ops; with the
  "torch" and "sparse" backends the PyTorch lines below run, as written.

Weights are copied from a transformers `LlamaForCausalLM`; the code is ours.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minillm.flat_batch import AttentionMetadata
from minillm.model_loader import check_llama_config
from minillm.packed_linear import Linear, PackedWeight, linear


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

    def add_and_norm(self, x, residual, kernels=None):
        """The residual add, then this norm: (norm(residual + x), residual + x).

        x=None: nothing to add (the first layer). With the C++ kernels
        (`minillm/cpu_kernels`) both are one loop, which writes the sum into `residual`."""
        if kernels is not None:
            return kernels.add_rms_norm(x, residual, self.weight, self.eps)
        if x is not None:
            residual = residual + x
        return self(residual), residual


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin for every position up to `max_positions`.

    `sin` is stored with its first half negated ("signed"), which is what
    `apply_rope` multiplies by (see there)."""

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)              # [P, D]
        sin_signed = angles.sin()
        sin_signed[:, :head_dim // 2].neg_()                      # −sin | sin
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin_signed", sin_signed, persistent=False)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype):
        """The rows for this step's positions [T], ready to broadcast over heads:
        (cos, signed sin), each [T, 1, D]. Looked up once per step, shared by every layer."""
        return (self.cos[positions].unsqueeze(1).to(dtype),
                self.sin_signed[positions].unsqueeze(1).to(dtype))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D] rotated: pairs (i, i + D/2) turn by each row's angles.

    With x = (x₁ | x₂), its two halves, the rotation is
    (x₁·cos − x₂·sin | x₂·cos + x₁·sin) — "rotate half". `x.roll(D/2)` is (x₂ | x₁), and
    `sin_signed` is (−sin | sin), so the second term is one product: three ops and a
    roll, and exactly the same roundings as writing the halves out."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


class Attention(nn.Module):
    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, bias: bool):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_size, self.kv_size = num_heads * head_dim, num_kv_heads * head_dim
        self.qkv_proj = Linear(hidden, self.q_size + 2 * self.kv_size, bias=bias)
        self.o_proj = Linear(self.q_size, hidden, bias=bias)
        self.scale = head_dim ** -0.5

    def forward(self, x, rope, layer_cache, meta, backend, kernels=None) -> torch.Tensor:
        """x [T, H]; rope = (cos, signed sin) of this step's positions (RotaryEmbedding)."""
        T, Hq, Hkv, D = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x).view(T, Hq + 2 * Hkv, D)          # [T, Hq + 2·Hkv, D]
        # queries and keys are neighbours in the fused output: rotate them in one go
        if kernels is not None:                                   # in place, one C++ loop
            qk = kernels.rope_(qkv[:, :Hq + Hkv], *rope)
        else:
            qk = apply_rope(qkv[:, :Hq + Hkv], *rope)            # [T, Hq + Hkv, D]
        q, k = qk.split([Hq, Hkv], dim=1)                         # [T, Hq, D], [T, Hkv, D]
        v = qkv[:, Hq + Hkv:]                                     # [T, Hkv, D]
        k_cache, v_cache = layer_cache
        out = backend(q, k, v, k_cache, v_cache, meta, self.scale)         # [T, Hq, D]
        return self.o_proj(out.reshape(T, self.q_size))                    # [T, H]


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, bias: bool):
        super().__init__()
        self.intermediate = intermediate
        self.gate_up_proj = Linear(hidden, 2 * intermediate, bias=bias)
        self.down_proj = Linear(intermediate, hidden, bias=bias)

    def forward(self, x: torch.Tensor, kernels=None) -> torch.Tensor:   # SwiGLU: [T, H] → [T, H]
        gate_up = self.gate_up_proj(x)                                   # [T, 2·I]
        if kernels is not None:
            return self.down_proj(kernels.silu_and_mul(gate_up))          # one C++ loop
        gate, up = gate_up.split(self.intermediate, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        head_dim = _head_dim(cfg)
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg.hidden_size, cfg.num_attention_heads,
                              cfg.num_key_value_heads, head_dim,
                              bias=getattr(cfg, "attention_bias", False))
        self.post_attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size, bias=getattr(cfg, "mlp_bias", False))

    def forward(self, h, pending, rope, layer_cache, meta, backend, kernels=None):
        """h [T, H]: the residual stream; pending: the previous layer's MLP output, not
        yet added to it (None at the first layer). Returns (h, this layer's MLP output):
        each residual add is done together with the norm that follows it."""
        x, h = self.input_norm.add_and_norm(pending, h, kernels)            # h += pending
        x = self.attn(x, rope, layer_cache, meta, backend, kernels)
        x, h = self.post_attention_norm.add_and_norm(x, h, kernels)         # h += attention
        return h, self.mlp(x, kernels)


class LlamaModel(nn.Module):
    """The whole network. Build it with `LlamaModel.from_hf(hf_model)`."""

    def __init__(self, cfg):
        super().__init__()
        check_llama_config(cfg)
        self.config = cfg
        self.num_layers = cfg.num_hidden_layers
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = _head_dim(cfg)
        self.vocab_size = cfg.vocab_size
        self.max_positions = cfg.max_position_embeddings
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rope = RotaryEmbedding(self.head_dim, _rope_theta(cfg), cfg.max_position_embeddings)
        self.tied = bool(getattr(cfg, "tie_word_embeddings", False))
        if not self.tied:
            self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head_packed: PackedWeight | None = None      # tied: the embedding, packed

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                meta: AttentionMetadata, logits_indices: torch.Tensor,
                backend) -> torch.Tensor:
        """input_ids, positions [T] → logits [len(logits_indices), vocab].

        The C++ element-wise kernels run when the backend carries them (the "cpp"
        backend: `minillm/attention/__init__.py`)."""
        kernels = getattr(backend, "cpu_kernels", None)
        h = self.embed_tokens(input_ids)                                   # [T, H]
        rope = self.rope.cos_sin(positions, h.dtype)                       # 2 × [T, 1, D]
        fused = (backend.fused_layers(self, kv_caches, meta, rope, h)      # a decode step,
                 if hasattr(backend, "fused_layers") else None)           # "cpp" backend
        if fused is not None:
            h, pending = fused(h)              # the loop below, in one C++ call (same bits)
        else:
            pending = None                               # a layer's output, not yet added
            for layer, layer_cache in zip(self.layers, kv_caches):
                h, pending = layer(h, pending, rope, layer_cache, meta, backend, kernels)
        h, _ = self.norm.add_and_norm(pending[logits_indices], h[logits_indices])   # [S, H]
        if not self.tied:
            return self.lm_head(h).float()                                 # [S, V]
        return linear(h, self.embed_tokens.weight, packed=self.lm_head_packed).float()

    def pack_weights(self, full_batch: int | None = None) -> "LlamaModel":
        """Pack every projection for the CPU's matmul kernels (no-op elsewhere);
        `full_batch`: the engine's batch slots, the row count worth a copy of its own
        (see packed_linear.py)."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.pack(full_batch)
        weight = self.embed_tokens.weight
        self.lm_head_packed = (PackedWeight(weight, full_batch=full_batch)
                               if self.tied and PackedWeight.supported(weight) else None)
        return self

    @classmethod
    def from_hf(cls, hf_model, dtype: torch.dtype | None = None,
                device: torch.device | str | None = None,
                full_batch: int | None = None) -> "LlamaModel":
        """Copy a transformers LlamaForCausalLM's weights into minillm's layout (packed
        for the CPU: `pack_weights(full_batch)`)."""
        cfg = hf_model.config
        model = cls(cfg)
        src = hf_model.state_dict()
        model.load_state_dict(_convert_state_dict(src, cfg, model.tied))
        param_dtype = dtype or next(hf_model.parameters()).dtype
        model = model.to(device=device or "cpu", dtype=param_dtype).eval()
        return model.pack_weights(full_batch)


def _convert_state_dict(src: dict, cfg, tied: bool) -> dict:
    """transformers names → minillm names, fusing QKV and gate/up."""
    out = {"embed_tokens.weight": src["model.embed_tokens.weight"],
           "norm.weight": src["model.norm.weight"]}
    if not tied:
        out["lm_head.weight"] = src["lm_head.weight"]
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


def _head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", None))
    if theta is None:
        raise ValueError("model config has no rope_theta")
    return float(theta)
