"""Lesson 13, the capstone: your engine — every exercise's part assembled — serves SmolLM2.

Three graded tasks, on whichever package is graded (`MINILLM_EXERCISES_FROM`):

* your parts run: every part this engine uses is yours (the note lists the ones that are
  still the answer key's, and why);
* greedy tokens equal transformers' in the continuous, chunked and prefix-cached
  configurations — the oracle the course's own tests use;
* a streamed chat through `python -m minillm serve --components exercises`, read with the
  official `openai` client, says exactly what `LLM.chat` says.

Parts that are not done fall back to the answer key's, so the last two pass on the
untouched stubs too: they grade the engine you assembled, the first grades how much of it
is yours. A part that disagrees with the answer key stops the run with a message naming
the part, the engine step and the request (`minillm/engine/adapters.py`).
"""

from __future__ import annotations

import openai
import pytest

from hf_reference import chat_prompt_ids, compare_with_ties, hf_greedy
from minillm import LLM, SamplingParams
from minillm.config import EngineConfig
from minillm.engine.components import format_report, learner_parts
from minillm.grading import TARGET_ENV, exercise_target
from minillm.serving.launcher import ServerProcess

QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea.",
             "Explain what a KV cache is in one sentence.", "List three prime numbers."]
MAX_TOKENS = [8, 24, 16, 12]
CONFIGS = {
    "continuous": dict(policy="priority"),
    "chunked": dict(enable_chunked_prefill=True, max_num_batched_tokens=32, block_size=4),
    "prefix_cached": dict(enable_prefix_caching=True, block_size=4, max_num_seqs=3),
}
# every part a CPU engine can use: the decode kernel (ex07) runs only on CUDA
EVERY_PART = EngineConfig(components="exercises", policy="priority", block_size=4,
                          enable_chunked_prefill=True, enable_prefix_caching=True)
KEY = "capstone-key"


@pytest.fixture(scope="module")
def chat_prompts(smollm2):
    hf, tokenizer = smollm2
    prompts = chat_prompt_ids(tokenizer, QUESTIONS)
    return prompts, [hf_greedy(hf, p, n) for p, n in zip(prompts, MAX_TOKENS)]


def test_your_parts_run_in_the_engine():
    import torch
    statuses = [s for s in learner_parts(device=torch.device("cpu"), config=EVERY_PART)
                if s.used]
    yours = [s.part.title for s in statuses if s.yours]
    not_yet = [s.part.title for s in statuses if not s.yours]
    # the first line is the grade sheet's note: which parts are the learner's
    assert not not_yet, (f"yours {len(yours)}/{len(statuses)}: {', '.join(yours) or 'none'}"
                         f" | not yet: {', '.join(not_yet)}\n{format_report(statuses)}")


@pytest.fixture(scope="module")
def learner_engines(smollm2):
    """The learner's engine per configuration, built once (the served test reuses one)."""
    hf, tokenizer = smollm2
    built = {}

    def engine(config: str) -> LLM:
        if config not in built:
            built[config] = LLM(hf, tokenizer=tokenizer, components="exercises",
                                **CONFIGS[config])
        return built[config]
    return engine


@pytest.mark.parametrize("config", CONFIGS)
def test_greedy_tokens_equal_transformers(config, learner_engines, chat_prompts):
    prompts, refs = chat_prompts
    llm = learner_engines(config)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                        [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
                         for n in MAX_TOKENS], use_tqdm=False)
    verdicts = [compare_with_ties(out.outputs[0].token_ids, want, gaps)
                for out, (want, gaps) in zip(outs, refs)]
    # a difference only where transformers' top two logits nearly tie (tests/hf_reference.py)
    assert "mismatch" not in verdicts and verdicts.count("equal") >= len(verdicts) - 1, verdicts


def test_served_stream_equals_generate(learner_engines):
    messages = [{"role": "user", "content": "Name three colours of the rainbow."}]
    params = SamplingParams(temperature=0.0, max_tokens=24)
    want = learner_engines("continuous").chat([messages], params,
                                              use_tqdm=False)[0].outputs[0].text
    server = ServerProcess("--components", "exercises", "--api-key", KEY,
                           env={TARGET_ENV: exercise_target()})
    try:
        server.start()
        with openai.OpenAI(base_url=server.url("/v1"), api_key=KEY, max_retries=0,
                           timeout=120) as client:
            stream = client.chat.completions.create(
                model="smollm2-135m", messages=messages, stream=True, temperature=0.0,
                max_tokens=24)
            pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        assert "".join(pieces) == want
        assert "your engine:" in server.log()          # the server said whose parts run
    finally:
        server.stop()
