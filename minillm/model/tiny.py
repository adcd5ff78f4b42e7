"""A tiny random Llama: a model in milliseconds, for tests and for lesson 07.

Unit tests need *a* Llama (the right shapes, the right math, weights that make its
outputs depend on the context), not a smart one. `build_tiny_llama` makes one with a
few hundred thousand deterministic random parameters; `LLM(build_tiny_llama())` runs
the whole engine on it.
"""

from __future__ import annotations

import torch


def tiny_llama_config(**overrides):
    """A `LlamaConfig` small enough to build and run in milliseconds.

    Defaults: vocab 256, hidden 64, 2 layers, 4 query heads sharing 2 KV heads (GQA ratio
    2, head dim 16), MLP 128, 512 positions, RoPE theta 10000, tied embeddings, BOS 0,
    EOS 1. Any field can be overridden, e.g. `num_key_value_heads=1` (ratio 4) or
    `hidden_size=256` (head dim 64).
    """
    from transformers import LlamaConfig

    fields = dict(
        vocab_size=256,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        initializer_range=0.02,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=None,
        hidden_act="silu",
    )
    fields.update(overrides)
    # head_dim left unset -> LlamaConfig derives it as hidden_size // num_attention_heads.
    config = LlamaConfig(**fields)
    config.architectures = ["LlamaForCausalLM"]
    return config


def build_tiny_llama(config=None, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """A `LlamaForCausalLM` with deterministic random weights, in eval mode.

    Same `seed` and config -> bit-identical weights, whatever the global RNG state: we
    draw every weight from a private `torch.Generator` (so building a test model never
    changes what other code samples), in `named_parameters()` order (a tied weight is
    listed once, so tying survives).

    How the weights are drawn matters more than it looks. transformers' default init
    (every matrix ~ N(0, 0.02)) makes the attention and MLP outputs tiny next to the
    token embedding, so the residual stream is almost just the embedding of the current
    token and, with tied embeddings, greedy decoding copies the last token forever
    (`7 7 7 7 ...`): a forward pass with broken RoPE or a wrong KV cache would still
    pass. So we draw

    - embeddings (and an untied `lm_head`) ~ N(0, initializer_range) (0.02, as
      transformers does);
    - every projection matrix ~ N(0, 1/fan_in), so each layer's output has unit scale
      and really depends on the context (attention scores of order 1, not ~0);
    - RMSNorm gains ~ 1 + 0.1 N(0, 1) rather than exactly 1, so a forward pass that
      forgets to multiply by the gain is caught; the final norm's gains are scaled by 4
      so the logits spread enough that sampling at temperature 1 is far from uniform,
      and the greedy top-2 gaps sit orders of magnitude above fp32 rounding noise.

    Result: greedy continuations of different prompts visit many different tokens.
    """
    from transformers import LlamaForCausalLM

    if config is None:
        config = tiny_llama_config(**overrides)
    elif overrides:
        base = config.to_dict()
        if "head_dim" not in overrides and {"hidden_size", "num_attention_heads"} & set(overrides):
            base.pop("head_dim", None)  # let it follow the new shape
        config = tiny_llama_config(**{**base, **overrides})
    generator = torch.Generator().manual_seed(seed)
    # transformers initialises the fresh model from the *global* RNG; fork_rng puts that
    # RNG state back afterwards. The values it draws are overwritten below anyway.
    with torch.random.fork_rng(devices=[]):
        model = LlamaForCausalLM(config)  # fp32

    def normal(shape, std):
        return torch.randn(shape, generator=generator, dtype=torch.float32) * std

    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):  # RMSNorm gains, shape [hidden]
                scale = 4.0 if name == "model.norm.weight" else 1.0
                param.copy_(scale * (1.0 + normal(param.shape, 0.1)))
            elif name.endswith(".bias"):  # optional projection biases, shape [out_features]
                param.copy_(normal(param.shape, 0.1))
            elif name.endswith(("embed_tokens.weight", "lm_head.weight")):  # [vocab, hidden]
                param.copy_(normal(param.shape, config.initializer_range))
            else:  # nn.Linear weight [out_features, in_features]: std 1/sqrt(fan_in)
                param.copy_(normal(param.shape, param.shape[1] ** -0.5))
    return model.to(dtype).eval()
