"""Python's side of `decoder_layer.cpp`: all of a decode step's layers in one C++ call.

With the "cpp" backend, `LlamaModel.forward` calls nine kernels a layer from Python
(two add+RMSNorms, four matmuls, RoPE, attention, SiLU·up). Between two of them the
step returns to Python, and since every matmul streams megabytes of weights through the
caches, Python and PyTorch find their own code and data evicted each time: a call that
costs ~4 µs in a loop costs ~20 µs inside a step. `decoder_layer.cpp` makes the same
calls, in the same order, from C++: one return to Python a step instead of 270, and
bit-for-bit the same numbers (PERFORMANCE.md, change 14, has what it buys).

`fused_layers` decides once per step whether the step qualifies, and if so packs what
the C++ side needs into two structs: per layer its weights (panels, biases, norm
weights) and KV cache (`LayerArgs`), and per step the rows' rotary tables and attention
metadata (`StepArgs`). A step qualifies when

* it computes in float32 and has 1-16 rows (`matmul_few_rows`'s range), and
* every projection is packed into panels that still match its weight, and
* no prefill chunk is long enough for the backend to hand it to SDPA.

Otherwise (a prefill step, bf16, more than 16 rows) the model runs the per-kernel path,
which is the readable one anyway.
"""

from __future__ import annotations

import ctypes

import torch

from minillm.cpu_kernels import MATMUL_MAX_ROWS

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


class FusedLayers:
    """`fused(h)` → (h, the last layer's output): what `LlamaModel.forward`'s loop over
    `DecoderLayer.forward` returns, in one call of `minillm_decoder_layers_float32`."""

    def __init__(self, entry, layers: list[LayerArgs], step: StepArgs, keep_alive: list):
        self.entry, self.step = entry, step
        self.layers = (LayerArgs * len(layers))(*layers)       # one C array of the structs
        self.keep_alive = keep_alive           # the tensors the structs point into

    def __call__(self, h: torch.Tensor):
        out, spare = torch.empty_like(h), torch.empty_like(h)            # [T, H] each
        failed = self.entry(ctypes.addressof(self.layers), len(self.layers),
                            ctypes.addressof(self.step), h.data_ptr(), out.data_ptr(),
                            spare.data_ptr())
        if failed:      # fused_layers checked every shape the kernels could refuse
            raise RuntimeError(f"minillm_decoder_layers_float32 failed (code {failed})")
        return h, out


def fused_layers(entry, model, kv_caches, meta, rope, h: torch.Tensor,
                 max_pairs: int) -> FusedLayers | None:
    """The step's layers as FusedLayers, or None when the step does not qualify (see the
    module docstring). `h` [T, H] is the embedded input; `rope` = (cos, signed sin)."""
    T = h.shape[0]
    if h.dtype != torch.float32 or not 1 <= T <= MATMUL_MAX_ROWS or not h.is_contiguous():
        return None
    if any(n > 1 and n * length > max_pairs
           for n, length in zip(meta.query_lens, meta.seq_lens_list)):
        return None                                   # a long prefill chunk: SDPA's job
    keep_alive = [rope, meta]
    layers = [_layer_args(layer, cache, keep_alive) for layer, cache in zip(model.layers, kv_caches)]
    if any(args is None for args in layers):
        return None
    cos, sin_signed = (x.reshape(T, -1) for x in rope)                   # [T, D] each
    keep_alive += [cos, sin_signed]
    tables = meta.block_tables
    step = StepArgs(T, cos.data_ptr(), sin_signed.data_ptr(), meta.slot_mapping.data_ptr(),
                    tables.data_ptr(), tables.stride(0), meta.query_start_loc.data_ptr(),
                    meta.seq_lens.data_ptr(), meta.num_seqs, max_pairs, torch.get_num_threads())
    return FusedLayers(entry, layers, step, keep_alive)


def _layer_args(layer, layer_cache, keep_alive: list) -> LayerArgs | None:
    attn, mlp = layer.attn, layer.mlp
    projections = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
    panels, biases = [], []
    for linear in projections:
        packed = linear.packed
        if packed is None or packed.panels is None or not packed.matches(linear.weight):
            return None
        panels.append(packed.panels.data_ptr())
        bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        keep_alive.append(bias)
        biases.append(None if bias is None else bias.data_ptr())
    k_cache, v_cache = layer_cache
    norms = (layer.input_norm.weight, layer.post_attention_norm.weight)
    if not (k_cache.dtype == v_cache.dtype == torch.float32 and k_cache.is_contiguous()
            and v_cache.is_contiguous() and all(n.is_contiguous() for n in norms)):
        return None
    return LayerArgs(norms[0].data_ptr(), norms[1].data_ptr(),
                     panels[0], biases[0], panels[1], biases[1],
                     panels[2], biases[2], panels[3], biases[3],
                     k_cache.data_ptr(), v_cache.data_ptr(),
                     norms[0].shape[0], attn.num_heads, attn.num_kv_heads, attn.head_dim,
                     mlp.intermediate, k_cache.shape[1],
                     layer.input_norm.eps, attn.scale)
