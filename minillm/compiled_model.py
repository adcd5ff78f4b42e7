"""Optional on CPU: the decoder stack compiled by inductor (`LLM(enforce_eager=False)`).

Eager PyTorch runs one decode step of SmolLM2 as about 1,800 small ops, each launched
from Python through the dispatcher. On a 2-core CPU the time *between* those ops is
~10 % of a step, and the element-wise chains (RMSNorm, RoPE, SiLU·up, residual adds)
each write their intermediate tensors to memory. `torch.compile` traces the 30 decoder
layers once into a graph, and inductor

* fuses every element-wise chain into one C++ loop nest;
* with `freezing`, treats the weights as constants and packs them for oneDNN itself
  (so the trace sees plain `F.linear`: `packed_linear.linear` steps aside while
  compiling);
* with `cpp_wrapper`, calls the kernels from generated C++, so Python leaves the step.

Paged attention stays outside the graph, as one custom op per layer
(`minillm::paged_attention`) that calls the engine's attention backend with the step's
metadata: the backends plan on Python lists, which a graph cannot hold. The embedding,
the final norm and the vocabulary projection (one call each) stay eager too.

Costs, measured in `minillm/PERFORMANCE.md`: compiling takes tens of seconds for each
of two graphs (one token, and any other count: dynamo specializes a size of 1), at the
first steps of every process (frozen graphs are not kept in inductor's disk cache), and
results differ from eager by float rounding (fp32 logits ~1e-5). So the default stays
eager: it is the path the lessons read and the one the oracle tests pin to
transformers.
"""

from __future__ import annotations

import time

import torch
from torch import nn

INDUCTOR_OPTIONS = {"freezing": True, "cpp_wrapper": True}

_current: dict = {}         # the step being run: its attention metadata and backend


@torch.library.custom_op("minillm::paged_attention", mutates_args=("k_cache", "v_cache"))
def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, scale: float) -> torch.Tensor:
    """The running step's attention backend, as one op the compiled graph calls."""
    step = _current["step"]
    return step.backend(q, k, v, k_cache, v_cache, step.meta, scale).contiguous()


@paged_attention.register_fake
def _(q, k, v, k_cache, v_cache, scale):
    return torch.empty_like(q)                  # [T, Hq, D], like the queries


class _GraphAttention:
    """What the traced layers call as their backend: the custom op above."""

    name = "compiled"

    def __call__(self, q, k, v, k_cache, v_cache, meta, scale):
        return torch.ops.minillm.paged_attention(q, k, v, k_cache, v_cache, scale)


class _DecoderStack(nn.Module):
    """The decoder layers as one module, so `freezing` sees their weights."""

    def __init__(self, layers: nn.ModuleList):
        super().__init__()
        self.layers = layers

    def forward(self, h, cos, sin, kv_caches):                # h [T, H] → [T, H]
        attention = _GraphAttention()
        for layer, layer_cache in zip(self.layers, kv_caches):
            h = layer(h, (cos, sin), layer_cache, None, attention)
        return h


class _Step:
    def __init__(self, meta, backend):
        self.meta, self.backend = meta, backend


class CompiledModel:
    """A `LlamaModel` whose decoder stack runs compiled; called like the model itself.

    `compile_seconds` records how long the first call of each graph took (the
    compilation, almost all of it): {"1 token": s, "more tokens": s}.
    """

    def __init__(self, model):
        self.model = model
        self.stack = torch.compile(_DecoderStack(model.layers), dynamic=True,
                                   options=INDUCTOR_OPTIONS)
        self.compile_seconds: dict[str, float] = {}

    def __getattr__(self, name):            # num_layers, head_dim, ...: the model's own
        if name == "model":                 # (not set yet: no model to ask)
            raise AttributeError(name)
        return getattr(self.model, name)

    @torch.inference_mode()
    def __call__(self, input_ids, positions, kv_caches, meta, logits_indices, backend):
        """Same contract as `LlamaModel.forward`: → logits [len(logits_indices), vocab]."""
        m = self.model
        h = m.embed_tokens(input_ids)                                      # [T, H]
        cos, sin = m.rope.cos_sin(positions, h.dtype)                      # 2 × [T, 1, D]
        graph = "1 token" if input_ids.shape[0] == 1 else "more tokens"
        start = time.perf_counter()
        _current["step"] = _Step(meta, backend)
        try:
            h = self.stack(h, cos, sin, kv_caches)
        finally:
            _current.pop("step", None)
        self.compile_seconds.setdefault(graph, time.perf_counter() - start)
        return m.logits(h[logits_indices])                              # [S, V]
