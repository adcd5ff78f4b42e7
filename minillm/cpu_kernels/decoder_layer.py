"""Python's side of `decoder_layer.cpp`: all of a decode step's layers in one C++ call.

With the "cpp" backend, `LlamaModel.forward` calls nine kernels a layer from Python
(two add+RMSNorms, four matmuls, RoPE, attention, SiLU·up). Between two of them the
step returns to Python, and since every matmul streams megabytes of weights through the
caches, Python and PyTorch find their own code and data evicted each time: a call that
costs ~4 µs in a loop costs ~20 µs inside a step. `decoder_layer.cpp` makes the same
calls, in the same order, from C++: one return to Python a step instead of 270, and
bit-for-bit the same numbers (PERFORMANCE.md, change 14, has what it buys).

`FusedDecoder.for_step` decides once per step whether the step qualifies, and if so
hands the C++ side two structs: per layer its weights (panels, biases, norm weights)
and KV cache (`LayerArgs`, built once into a `LayerStack` and rebuilt only when one of
them changes), and per step the rows' rotary tables and attention metadata
(`StepArgs`). A step qualifies when

* it computes in float32 and has 1-16 rows (`matmul_few_rows`'s range), and
* every projection is packed into panels that still match its weight, and
* no prefill chunk is long enough for the backend to hand it to SDPA.

Otherwise (a prefill step, bf16, more than 16 rows) the model runs the per-kernel path,
which is the readable one anyway.
"""

from __future__ import annotations

import ctypes

import torch

from minillm.cpu_kernels import MATMUL_MAX_ROWS, CpuKernels

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


class LayerStack:
    """A model's layers as one C array of LayerArgs, built once and kept while nothing it
    points into changes. It remembers every attribute it read on the way to a tensor (a
    module's entry in its parent, a projection's weight, bias and packed copy) and each
    tensor's address and version counter (bumped by any in-place change, which would
    leave its panels stale): `still_valid` re-checks them all with dictionary lookups,
    ~60 µs for SmolLM2's 30 layers, where rebuilding costs ~550."""

    def __init__(self, model, kv_caches):
        self.model, self.kv_caches = model, [tuple(pair) for pair in kv_caches]
        self.read: list[tuple[dict, str, object]] = []     # (where, name, what was there)
        layers = [self._layer_args(i, cache) for i, cache in enumerate(self.kv_caches)]
        self.tensors = [(t, t._version, t.data_ptr()) for where, name, t in self.read
                        if isinstance(t, torch.Tensor)]
        self.array = (None if any(args is None for args in layers)
                      else (LayerArgs * len(layers))(*layers))

    def still_valid(self, model, kv_caches) -> bool:
        return (model is self.model and len(kv_caches) == len(self.kv_caches)
                and all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(kv_caches, self.kv_caches))
                and all(where.get(name) is what for where, name, what in self.read)
                and all(t._version == version and t.data_ptr() == ptr
                        for t, version, ptr in self.tensors))

    def _get(self, module, name: str):
        """module.name, remembered: from its parameters, submodules or plain attributes."""
        for where in (module._parameters, module._modules, module.__dict__):
            if name in where:
                self.read.append((where, name, where[name]))
                return where[name]
        raise AttributeError(name)

    def _layer_args(self, i: int, layer_cache) -> LayerArgs | None:
        """None when the layer cannot run fused: heads the attention kernel has no instance
        for, a projection not packed into panels (or packed from an earlier version of
        its weight), a KV cache not fp32 contiguous. The per-kernel path then runs it, or
        says what is wrong."""
        get = self._get
        layer = get(get(self.model, "layers"), str(i))
        attn, mlp = get(layer, "attn"), get(layer, "mlp")
        if CpuKernels.unsupported(torch.float32, attn.num_heads, attn.num_kv_heads, attn.head_dim):
            return None
        panels, biases = [], []
        for parent, name in ((attn, "qkv_proj"), (attn, "o_proj"), (mlp, "gate_up_proj"),
                             (mlp, "down_proj")):
            linear = get(parent, name)
            weight, bias, packed = get(linear, "weight"), get(linear, "bias"), get(linear, "packed")
            if packed is None or packed.panels is None or not packed.matches(weight):
                return None
            if bias is not None and not (bias.dtype == torch.float32 and bias.is_contiguous()):
                return None
            panels.append(packed.panels.data_ptr())
            biases.append(None if bias is None else bias.data_ptr())
        norms = [get(get(layer, name), "weight") for name in ("input_norm", "post_attention_norm")]
        k_cache, v_cache = layer_cache
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


class FusedLayers:
    """`fused(h)` → (h, the last layer's output): what `LlamaModel.forward`'s loop over
    `DecoderLayer.forward` returns, in one call of `minillm_decoder_layers_float32`."""

    def __init__(self, entry, stack: LayerStack, step: StepArgs, keep_alive: list):
        self.entry, self.stack, self.step = entry, stack, step
        self.keep_alive = keep_alive           # the step's tensors StepArgs points into

    def __call__(self, h: torch.Tensor):
        out, spare = torch.empty_like(h), torch.empty_like(h)            # [T, H] each
        failed = self.entry(ctypes.addressof(self.stack.array), len(self.stack.array),
                            ctypes.addressof(self.step), h.data_ptr(), out.data_ptr(),
                            spare.data_ptr())
        if failed:      # FusedDecoder checked every shape the kernels could refuse
            raise RuntimeError(f"minillm_decoder_layers_float32 failed (code {failed})")
        return h, out


class FusedDecoder:
    """The "cpp" backend's offer, step by step: `for_step(...)` → FusedLayers, or None
    when the step does not qualify (see the module docstring; `CppAttention.fused_layers`
    has already turned away steps with a long prefill chunk). It keeps the LayerStack of
    the model it last saw, and rebuilds it when anything the stack read has changed."""

    def __init__(self, entry, max_pairs: int):
        self.entry, self.max_pairs = entry, max_pairs
        self.stack: LayerStack | None = None

    def for_step(self, model, kv_caches, meta, rope, h: torch.Tensor) -> FusedLayers | None:
        """`h` [T, H]: the embedded input; `rope` = (cos, signed sin), each [T, 1, D]."""
        T = h.shape[0]
        if h.dtype != torch.float32 or not 1 <= T <= MATMUL_MAX_ROWS or not h.is_contiguous():
            return None
        if self.stack is None or not self.stack.still_valid(model, kv_caches):
            self.stack = LayerStack(model, kv_caches)
        if self.stack.array is None:
            return None
        cos, sin_signed = (x.reshape(T, -1) for x in rope)               # [T, D] each
        tables = meta.block_tables
        step = StepArgs(T, cos.data_ptr(), sin_signed.data_ptr(), meta.slot_mapping.data_ptr(),
                        tables.data_ptr(), tables.stride(0), meta.query_start_loc.data_ptr(),
                        meta.seq_lens.data_ptr(), meta.num_seqs, self.max_pairs,
                        torch.get_num_threads())
        return FusedLayers(self.entry, self.stack, step, [cos, sin_signed, meta])
