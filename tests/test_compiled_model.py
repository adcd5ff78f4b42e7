"""`LLM(enforce_eager=False)`: the decoder stack compiled by inductor (compiled_model.py).

Compiled, the engine must give each request exactly the greedy tokens transformers
gives it alone — with decode-only steps of one sequence (the one-token graph) and
steps that mix a prefill chunk with decodes (the graph for any other token count) —
and report how long each graph took to compile. The tiny random Llama keeps the
compile short (two layers; tens of seconds on two cores).
"""

from __future__ import annotations

import pytest
import torch

from hf_reference import compare_with_ties, hf_greedy
from minillm import LLM, SamplingParams
from minillm.attention import SparseAttention
from minillm.compiled_model import CompiledModel
from minillm.model import LlamaModel
from minillm.tiny_llama import build_tiny_llama

PROMPTS = [[5, 17, 33, 2, 90, 41, 7], [200, 3, 3, 61], list(range(10, 40)), [77]]
MAX_TOKENS = [12, 20, 6, 16]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_llama(seed=0, max_position_embeddings=128)


@pytest.fixture(scope="module")
def compiled_llm(tiny):
    return LLM(tiny, enforce_eager=False, block_size=4, num_kv_blocks=64, max_num_seqs=3,
               enable_chunked_prefill=True, max_num_batched_tokens=16)


@pytest.mark.timeout(900)
def test_compiled_engine_gives_transformers_greedy_tokens(tiny, compiled_llm):
    outs = compiled_llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                                 [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
                                  for n in MAX_TOKENS], use_tqdm=False)
    for prompt, n, out in zip(PROMPTS, MAX_TOKENS, outs):
        want, gaps = hf_greedy(tiny, prompt, n)
        assert compare_with_ties(list(out.outputs[0].token_ids), want, gaps) != "mismatch"
    # a batch of one decode and steps of many tokens both ran, each through its graph
    steps = compiled_llm.trace.steps
    assert any(s.num_prefill_tokens > 0 and len(s.scheduled) > 1 for s in steps)
    assert any(len(s.scheduled) == 1 and s.num_prefill_tokens == 0 for s in steps)
    runner_model = compiled_llm.llm_engine.runner.model
    assert isinstance(runner_model, CompiledModel)
    assert set(runner_model.compile_seconds) == {"1 token", "more tokens"}
    assert all(seconds > 0 for seconds in runner_model.compile_seconds.values())


@pytest.mark.timeout(900)
def test_compiled_logits_match_transformers_as_closely_as_eager(tiny):
    """The flat-batch forward test of test_forward.py, through the compiled stack: several
    prompts prefilled in one step, then decodes of all of them, then of one alone."""
    from test_forward import TINY_REL_TOL, max_rel_diff
    compiled = CompiledModel(LlamaModel.from_hf(tiny))
    prompts, continuations = [[5, 17, 33, 2, 90], [200, 3, 3, 61, 8, 9, 10]], [[4, 8, 15], [16, 23, 42]]
    for batch in ((prompts, continuations), (prompts[:1], continuations[:1])):
        diff = max_rel_diff(compiled, tiny, *batch, SparseAttention())
        assert diff <= TINY_REL_TOL, f"max relative logit difference {diff:.2e}"
    assert set(compiled.compile_seconds) == {"1 token", "more tokens"}


def test_enforce_eager_is_checked_and_eager_is_the_default(tiny):
    with pytest.raises(TypeError, match="enforce_eager"):
        LLM(tiny, enforce_eager="no")
    llm = LLM(tiny, num_kv_blocks=8)
    assert not isinstance(llm.llm_engine.runner.model, CompiledModel)
    assert llm.llm_engine.runner.model is llm.model


def test_compiling_for_a_gpu_is_refused_before_loading(tiny, monkeypatch):
    import minillm.llm as llm_module
    monkeypatch.setattr(llm_module, "resolve_device", lambda device: torch.device("cuda"))
    loaded = []
    monkeypatch.setattr(llm_module, "load_model_and_tokenizer", lambda m: loaded.append(m))
    with pytest.raises(ValueError, match="CPU only"):
        LLM(tiny, enforce_eager=False)
    assert not loaded
