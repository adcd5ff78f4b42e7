"""All of a small step's decoder layers in one C++ call (`csrc/decoder_layer.cpp`).

With the modules of `modules.py` swapped in, the readable `DecoderLayer` makes nine
kernel calls a layer (two norms, four matmuls, RoPE, attention, SiLU·up), and between
two of them the step returns to Python. Every matmul streams megabytes of weights
through the caches, so Python and PyTorch find their own code and data evicted each
time, and a call that is cheap in a loop is several times dearer inside a step.
`decoder_layer.cpp` makes the same calls, in the same order, from C++: one return to
Python a step instead of hundreds (docs/performance.md, change 14, says what it buys).

`FusedDecoderStack` takes the place of the model's `DecoderStack` (the same layer
modules: `stack[i]` is still layer i) and decides once per step:

* it runs fused when the step computes in float32 with 1-16 rows (`matmul_few_rows`'s
  range), its attention is the "cpp" backend with no long prefill chunk in the plan,
  and every layer's projections are packed into panels that still match their weights;
* otherwise (a long prefill, bf16, more than 16 rows) the readable loop over the layers
  runs, with the C++ modules inside.

Both give the same bits (tests/test_forward.py); set `stack.fused = False` to run every
step layer by layer (lesson 07's appendix compares the two). The stack reads the layers' weights
when it is built: replace a module of a loaded model and the fused path would not see
it — load the model again instead (`LLM(...)`), or use `executor="eager"`.
"""

from __future__ import annotations

import ctypes

import torch

from minillm.model.llama import DecoderStack
from minillm_cpu.cpp_attention import CppAttention
from minillm_cpu.kernels import MATMUL_MAX_ROWS, CpuKernels

_P, _I64 = ctypes.c_void_p, ctypes.c_int64


class LayerArgs(ctypes.Structure):
    """`struct LayerArgs` of decoder_layer.cpp, field for field."""
    _fields_ = ([(name, _P) for name in (
        "input_norm", "post_norm", "qkv", "qkv_bias", "o", "o_bias", "gate_up",
        "gate_up_bias", "down", "down_bias", "k_cache", "v_cache")]
        + [(name, _I64) for name in (
            "hidden", "num_heads", "num_kv_heads", "head_dim", "intermediate", "block_size")]
        + [("eps", ctypes.c_float), ("scale", ctypes.c_float)])


class StepArgs(ctypes.Structure):
    """`struct StepArgs` of decoder_layer.cpp, field for field."""
    _fields_ = [("rows", _I64), ("cos", _P), ("sin_signed", _P), ("slot_mapping", _P),
                ("block_tables", _P), ("table_stride", _I64), ("query_start_loc", _P),
                ("seq_lens", _P), ("num_seqs", _I64), ("max_pairs", _I64),
                ("num_threads", ctypes.c_int)]


def layer_weights(layer) -> dict | None:
    """What decoder_layer.cpp reads of one layer (pointers and sizes), or None when the
    layer cannot run fused: heads the attention kernel has no instance for, or a
    projection without panels (bf16, no AVX-512)."""
    attn, mlp = layer.attn, layer.mlp
    if CpuKernels.unsupported(torch.float32, attn.num_heads, attn.num_kv_heads, attn.head_dim):
        return None
    projections = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
    if any(getattr(p, "packed", None) is None or p.packed.panels is None for p in projections):
        return None
    tensors = [layer.input_norm.weight, layer.post_attention_norm.weight]
    for p in projections:
        tensors += [p.packed.panels] + ([p.bias] if p.bias is not None else [])
    if not all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors):
        return None
    pointers = []
    for p in projections:
        pointers += [p.packed.panels.data_ptr(), None if p.bias is None else p.bias.data_ptr()]
    # what the C++ reads, and the weights its panels were packed from
    watched = tensors + [p.weight for p in projections]
    return {"pointers": pointers, "watched": watched,
            "norms": (layer.input_norm.weight.data_ptr(), layer.post_attention_norm.weight.data_ptr()),
            "sizes": (layer.input_norm.weight.shape[0], attn.num_heads, attn.num_kv_heads,
                      attn.head_dim, mlp.gate_up_proj.out_features // 2),
            "eps": layer.input_norm.eps, "scale": attn.scale}


class FusedDecoderStack(DecoderStack):
    """The model's layers; a qualifying step runs them in one C++ call (module docstring)."""

    def __init__(self, layers: DecoderStack, kernels: CpuKernels):
        super().__init__(layers)
        self.entry = kernels.decoder_layers_entry
        self.weights = [layer_weights(layer) for layer in self]
        self.fusable = all(w is not None for w in self.weights)
        self.watched = ([(t, t._version, t.data_ptr()) for w in self.weights for t in w["watched"]]
                        if self.fusable else [])
        self.array, self.array_caches = None, None     # LayerArgs for the caches last seen
        self.fused = True                              # False: always layer by layer

    def forward(self, h, rope, kv_caches, attention) -> torch.Tensor:
        if not self.qualifies(h, kv_caches, attention):
            return super().forward(h, rope, kv_caches, attention)
        T = h.shape[0]
        cos, sin_signed = (x.reshape(T, -1).contiguous() for x in (rope.cos, rope.sin_signed))
        meta, tables = attention.meta, attention.meta.block_tables
        step = StepArgs(T, cos.data_ptr(), sin_signed.data_ptr(), meta.slot_mapping.data_ptr(),
                        tables.data_ptr(), tables.stride(0), meta.query_start_loc.data_ptr(),
                        meta.seq_lens.data_ptr(), meta.num_seqs, attention.backend.max_pairs,
                        torch.get_num_threads())
        h, last, spare = h.clone(), torch.empty_like(h), torch.empty_like(h)   # [T, H] each
        failed = self.entry(ctypes.addressof(self.array), len(self.array),
                            ctypes.addressof(step), h.data_ptr(), last.data_ptr(),
                            spare.data_ptr())
        if failed:      # `qualifies` checked every shape the kernels could refuse
            raise RuntimeError(f"minillm_decoder_layers_float32 failed (code {failed})")
        return h + last                          # the last layer's output, added

    def qualifies(self, h: torch.Tensor, kv_caches, attention) -> bool:
        """Whether this step runs fused (see the module docstring)."""
        if not (self.fused and self.fusable and isinstance(attention.backend, CppAttention)
                and attention.plan.long_chunks is None and h.dtype == torch.float32
                and 1 <= h.shape[0] <= MATMUL_MAX_ROWS and h.is_contiguous()):
            return False
        if not all(t._version == version and t.data_ptr() == ptr
                   for t, version, ptr in self.watched):
            return False              # a weight changed since the panels were packed
        return self._layer_args(kv_caches) is not None

    def _layer_args(self, kv_caches):
        """The C array of LayerArgs for these caches (rebuilt when they change)."""
        caches = [tuple(pair) for pair in kv_caches]
        same = (self.array_caches is not None and len(caches) == len(self.array_caches)
                and all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(caches, self.array_caches)))
        if not same:
            self.array_caches = caches
            self.array = self._build(caches)
        return self.array

    def _build(self, caches):
        if len(caches) != len(self.weights) or not all(
                k.dtype == v.dtype == torch.float32 and k.is_contiguous() and v.is_contiguous()
                for k, v in caches):
            return None
        args = [LayerArgs(*w["norms"], *w["pointers"], k.data_ptr(), v.data_ptr(),
                          *w["sizes"], k.shape[1], w["eps"], w["scale"])
                for w, (k, v) in zip(self.weights, caches)]
        return (LayerArgs * len(args))(*args)
