"""`python -m minillm serve` on the real SmolLM2, driven the way users drive it.

A real server subprocess on 127.0.0.1 and a free port (tests/server_support.py), the
official `openai` client for everything a user would do, plain httpx where a test needs
the raw stream. Every test checks the server afterwards: all KV blocks free, nothing
running or waiting. The bad requests are in test_server_errors.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import httpx
import openai
import pytest
from server_support import (HEADERS, KEY, MODEL, PROMPTS, QUESTION,  # noqa: F401
                            all_blocks_free_after_each_test, client, scrape, server,
                            wait_until_idle)

from minillm import SamplingParams
from minillm.serving.launcher import ServerProcess

pytestmark = pytest.mark.model


def greedy(llm, prompts, max_tokens=16):
    return llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens),
                        use_tqdm=False)


def test_completions_give_the_greedy_tokens_of_generate(server, client, smollm2_llm):
    expected = greedy(smollm2_llm, PROMPTS)
    for prompt, ref in zip(PROMPTS, expected):
        full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=16,
                                         temperature=0, extra_body={"return_token_ids": True})
        choice = full.choices[0]
        assert choice.text == ref.outputs[0].text
        assert choice.model_extra["token_ids"] == ref.outputs[0].token_ids
        assert full.usage.prompt_tokens == len(ref.prompt_token_ids)
        assert full.usage.completion_tokens == len(ref.outputs[0].token_ids)
        assert choice.finish_reason == ref.outputs[0].finish_reason

        chunks = list(client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"return_token_ids": True}))
        pieces = [c for c in chunks if c.choices]
        assert "".join(c.choices[0].text for c in pieces) == ref.outputs[0].text
        assert sum((c.choices[0].model_extra["token_ids"] for c in pieces), []) \
            == ref.outputs[0].token_ids
        assert pieces[-1].choices[0].finish_reason == ref.outputs[0].finish_reason
        assert chunks[-1].usage.completion_tokens == len(ref.outputs[0].token_ids)
        assert chunks[-1].usage.prompt_tokens == len(ref.prompt_token_ids)


def test_a_token_id_prompt_is_used_as_given(server, client, smollm2_llm):
    ids = smollm2_llm.get_tokenizer()(PROMPTS[0]).input_ids
    ref = greedy(smollm2_llm, {"prompt_token_ids": ids}, max_tokens=8)[0]
    out = client.completions.create(model=MODEL, prompt=ids, max_tokens=8, temperature=0)
    assert out.choices[0].text == ref.outputs[0].text
    assert out.usage.prompt_tokens == len(ids)


def test_chat_gives_the_greedy_answer_of_llm_chat(server, client, smollm2_llm):
    ref = smollm2_llm.chat(QUESTION, SamplingParams(temperature=0.0, max_tokens=16),
                           use_tqdm=False)[0]
    full = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16,
                                          temperature=0)
    assert full.choices[0].message.content == ref.outputs[0].text
    assert full.choices[0].message.role == "assistant"
    assert full.usage.prompt_tokens == len(ref.prompt_token_ids)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_completion_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref.outputs[0].text
    assert chunks[-1].usage.completion_tokens == len(ref.outputs[0].token_ids)


def test_32_concurrent_streaming_clients_all_get_their_own_answer(server, smollm2_llm):
    prompts = [f"Question {i}: what is {i} plus {i}? Answer:" for i in range(32)]
    expected = [o.outputs[0].text for o in greedy(smollm2_llm, prompts, max_tokens=8)]

    async def one(client, prompt):
        stream = await client.completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                                 temperature=0, stream=True)
        return "".join([c.choices[0].text async for c in stream if c.choices])

    async def all_of_them():
        async with openai.AsyncOpenAI(base_url=server.url("/v1"), api_key=KEY,
                                      max_retries=0, timeout=300) as client:
            return await asyncio.wait_for(
                asyncio.gather(*(one(client, p) for p in prompts)), timeout=600)

    assert asyncio.run(all_of_them()) == expected


def test_a_client_that_disconnects_mid_stream_is_aborted_within_a_step(server):
    body = {"prompt": PROMPTS[2], "max_tokens": 400, "ignore_eos": True, "stream": True,
            "temperature": 0}
    with httpx.Client(timeout=120, headers=HEADERS) as http:
        with http.stream("POST", server.url("/v1/completions"), json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            for _ in range(3):
                next(lines)
            request_id = first.split('"id":"cmpl-')[1].split('"')[0]
        # leaving the block closed the connection mid-stream
        deadline = time.monotonic() + 60
        while not (records := http.get(server.url("/minillm/requests"),
                                       params={"ids": request_id}).json()["requests"]):
            assert time.monotonic() < deadline, "the aborted request never showed up"
            time.sleep(0.05)
    record = records[0]
    assert record["finish_reason"] == "abort"
    assert record["steps_to_abort"] <= 1        # the step in flight when it left, no more
    assert record["completion_tokens"] < 400


def test_models_health_and_metrics_count_exactly(server, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    before = scrape(server)
    out = client.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=7,
                                    temperature=0, extra_body={"ignore_eos": True})
    after = wait_until_idle(server)
    assert out.usage.completion_tokens == 7

    def grew(name):
        return after[name] - before[name]
    assert grew("minillm:generation_tokens_total") == 7
    assert grew("minillm:prompt_tokens_total") == out.usage.prompt_tokens
    assert grew("minillm:time_to_first_token_seconds_count") == 1
    assert grew("minillm:inter_token_latency_seconds_count") == 6
    assert grew("minillm:e2e_request_latency_seconds_count") == 1


def test_the_load_generator_counts_exactly_what_the_server_generated(server):
    from benchmarks.serve.sweep import run_rate
    shapes = ((5, 3), (9, 6), (17, 1), (33, 8))              # (prompt tokens, max_tokens)
    bodies = [{"model": MODEL, "prompt": list(range(100, 100 + n)), "max_tokens": m,
               "ignore_eos": True, "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True}} for n, m in shapes]
    summary, results = run_rate(server.base_url, bodies, float("inf"), api_key=KEY)
    assert (summary["completed"], summary["failed"]) == (4, 0), summary["errors"]
    assert summary["total_input_tokens"] == sum(n for n, _ in shapes)
    assert summary["total_output_tokens"] == sum(m for _, m in shapes)
    assert all(0 < r.ttft <= r.latency for r in results)
    assert [r.tpot is None for r in results] == [False, False, True, False]
    assert summary["median_ttft_ms"] > 0 and summary["p99_itl_ms"] > 0


@pytest.fixture
def tiny_queue_server():
    """One running sequence, at most one waiting: the third request is shed."""
    proc = ServerProcess("--max-num-seqs", "1", "--max-queued-requests", "1",
                         "--graceful-shutdown-timeout", "2")
    try:
        yield proc.start()
    finally:
        proc.stop()


def test_a_full_queue_answers_503_with_retry_after_then_sigterm_leaves_nothing(tiny_queue_server):
    server = tiny_queue_server
    long = {"prompt": "Count:", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=120) as http, contextlib.ExitStack() as streams:
        running = streams.enter_context(http.stream("POST", server.url("/v1/completions"),
                                                    json=long))
        assert running.status_code == 200
        running_lines = running.iter_lines()
        next(running_lines)                                  # its first token: it runs
        waiting = streams.enter_context(http.stream("POST", server.url("/v1/completions"),
                                                    json=long))
        assert waiting.status_code == 200                    # admitted, queued behind it
        shed = http.post(server.url("/v1/completions"), json={"prompt": "hi"})
        assert shed.status_code == 503 and shed.headers["Retry-After"] == "1"
        assert shed.json()["error"]["code"] == "queue_full"
        assert scrape(server)["minillm:num_requests_shed_total"] == 1
        # SIGTERM with two requests in flight: aborted after the 2 s grace period, each
        # client told so by an error event, then [DONE]; the process exits cleanly
        os.killpg(server.pid, signal.SIGTERM)
        for lines in (running_lines, waiting.iter_lines()):
            tail = [line for line in lines if line][-2:]
            assert "shutting down" in tail[0] and tail[1] == "data: [DONE]", tail
        assert server.process.wait(timeout=60) == 0
        with pytest.raises(ProcessLookupError):
            os.killpg(server.pid, 0)                         # nothing left in its group
