"""The server's pieces without a model: the engine loop on a scripted engine, the request
checks, the response shapes, the metrics. Fast; the real-model tests are test_server.py."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from minillm.engine.checks import InvalidValue
from minillm.outputs import CompletionOutput, EngineStats, RequestMetrics, RequestOutput
from minillm.sampling_params import SamplingParams
from minillm.serving.api_server import sampling_params
from minillm.serving.async_engine import AsyncEngine, QueueFullError, RequestFailed
from minillm.serving.errors import APIError, from_engine_error, from_validation_error
from minillm.serving.metrics import ServerMetrics
from minillm.serving.prompt_builder import PromptBuilder
from minillm.serving.protocol import ChatCompletionRequest, CompletionRequest, check_supported
from minillm.serving.responses import ResponseShape, text_delta

pytestmark = pytest.mark.unit
NUM_BLOCKS = 10


class ScriptedEngine:
    """Each request holds one KV block and gets token 100+k at its k-th step."""

    def __init__(self):
        self.live: dict[str, list] = {}        # id -> [max_tokens, tokens, prompt ids]
        self.fail_next_step: Exception | None = None
        self.num_steps = 0
        self.first_token_step: dict[str, int | None] = {}
        self.added_after_step: dict[str, int] = {}

    def add_request(self, request_id, prompt, params, priority=0):
        if prompt["prompt_token_ids"][0] == 0:
            raise ValueError("token 0 is refused by this engine")
        self.live[request_id] = [params.max_tokens, [], prompt["prompt_token_ids"]]
        self.first_token_step.setdefault(request_id, None)
        self.added_after_step[request_id] = self.num_steps

    def step(self):
        self.num_steps += 1
        if self.fail_next_step is not None:
            error, self.fail_next_step = self.fail_next_step, None
            raise error
        outputs = []
        for rid, (max_tokens, tokens, prompt) in list(self.live.items()):
            tokens.append(100 + len(tokens))
            if self.first_token_step[rid] is None:
                self.first_token_step[rid] = self.num_steps
            finished = len(tokens) == max_tokens
            if finished:
                del self.live[rid]
            completion = CompletionOutput(0, "".join(chr(97 + t % 26) for t in tokens),
                                          list(tokens), "length" if finished else None)
            outputs.append(RequestOutput(rid, None, prompt, [completion], finished,
                                         RequestMetrics(0.0, 0.0, 0.1, 0.2 if finished else None,
                                                        len(tokens))))
        return outputs

    def abort_request(self, request_id):
        return self.live.pop(request_id, None) is not None

    def has_unfinished_requests(self):
        return bool(self.live)

    def stats(self):
        return EngineStats(len(self.live), 0, NUM_BLOCKS - len(self.live), NUM_BLOCKS)


def run(scenario, **kwargs):
    """Run `scenario(loop, engine)` against a started AsyncEngine; always shut it down."""
    async def main():
        engine = ScriptedEngine()
        loop = AsyncEngine(engine, **kwargs)
        await loop.start()
        try:
            return await asyncio.wait_for(scenario(loop, engine), timeout=30)
        finally:
            await loop.shutdown()
    return asyncio.run(main())


def prompt(first=1):
    return {"prompt_token_ids": [first, 2, 3]}


def params(n):
    return SamplingParams(temperature=0.0, max_tokens=n)


def test_tokens_reach_the_stream_as_they_are_sampled():
    async def scenario(loop, engine):
        stream = await loop.add_request("a", prompt(), params(3))
        return [(len(o.outputs[0].token_ids), o.finished) async for o in stream]
    assert run(scenario) == [(1, False), (2, False), (3, True)]


def test_a_request_that_arrives_mid_run_joins_the_next_step():
    async def scenario(loop, engine):
        first = await loop.add_request("a", prompt(), params(50))
        await first.__anext__()
        second = await loop.add_request("b", prompt(), params(1))
        await second.__anext__()
        a_still_running = "a" in engine.live
        first.close()
        return engine.first_token_step["b"] - engine.added_after_step["b"], a_still_running
    steps, a_still_running = run(scenario)
    assert steps == 1 and a_still_running   # b's token came in the very next step, while a ran


def test_a_refused_request_fails_alone():
    async def scenario(loop, engine):
        good = asyncio.create_task(loop.add_request("good", prompt(), params(2)))
        with pytest.raises(ValueError, match="refused"):
            await loop.add_request("bad", prompt(first=0), params(2))
        return [o.finished async for o in await good]
    assert run(scenario) == [False, True]


def test_a_failing_step_fails_the_requests_in_the_engine_and_the_loop_goes_on():
    async def scenario(loop, engine):
        streams = [await loop.add_request(r, prompt(), params(3)) for r in "ab"]
        engine.fail_next_step = RuntimeError("boom")
        for stream in streams:
            with pytest.raises(RequestFailed, match="boom"):
                async for _ in stream:
                    pass
        assert not engine.live and loop.stats.num_free_blocks == NUM_BLOCKS
        later = await loop.add_request("c", prompt(), params(2))
        return [o.finished async for o in later]
    assert run(scenario) == [False, True]


def test_close_aborts_the_request_before_the_next_step():
    async def scenario(loop, engine):
        metrics = ServerMetrics("m")
        loop.observer = metrics
        stream = await loop.add_request("a", prompt(), params(1000))
        await stream.__anext__()
        stream.close()
        while engine.live:
            await asyncio.sleep(0.01)
        return metrics.log.find(["a"])[0], loop.stats.num_free_blocks
    record, free = run(scenario)
    assert record["finish_reason"] == "abort" and record["steps_to_abort"] <= 1
    assert free == NUM_BLOCKS


def test_a_full_queue_sheds_the_next_request():
    async def scenario(loop, engine):
        first = asyncio.create_task(loop.add_request("a", prompt(), params(1)))
        second = asyncio.create_task(loop.add_request("b", prompt(), params(1)))
        with pytest.raises(QueueFullError, match="retry after"):
            await second
        return [o.finished async for o in await first]
    assert run(scenario, max_queued_requests=1) == [True]


def test_shutdown_fails_what_is_in_flight_and_stops_the_loop():
    async def main():
        engine = ScriptedEngine()
        loop = AsyncEngine(engine)
        await loop.start()
        stream = await loop.add_request("a", prompt(), params(10_000))
        await stream.__anext__()
        await loop.shutdown()
        with pytest.raises(RequestFailed, match="shutting down"):
            await stream.__anext__()
        return loop, engine
    loop, engine = asyncio.run(main())
    assert not engine.live and not loop.is_running


def test_every_tensor_operation_of_the_server_runs_on_one_thread(monkeypatch):
    """Load, warm-up and every step on the engine thread, never on the event loop's:
    a second thread running PyTorch makes a second OpenMP team, and then libgomp lets
    every worker sleep between parallel regions (serving/engine_thread.py)."""
    import threading
    from types import SimpleNamespace

    import minillm.llm
    import minillm.serving.cli as cli

    seen = {}

    class RecordingEngine(ScriptedEngine):
        tokenizer = None
        engine_config = SimpleNamespace(max_model_len=64)

        def step(self):
            seen.setdefault("step", set()).add(threading.get_ident())
            return super().step()

    def load_engine(model, config):
        seen["build"] = threading.get_ident()
        return RecordingEngine()

    monkeypatch.setattr(minillm.llm, "load_engine", load_engine)
    monkeypatch.setattr(cli, "warm_up", lambda engine: seen.setdefault("warm_up",
                                                                        threading.get_ident()))
    args = SimpleNamespace(model="m", engine_config=None, served_model_name="m",
                           max_queued_requests=8, api_key=None)
    app, loop = cli.build_server(args)

    async def serve_two():
        await loop.start()
        try:
            for name in "ab":
                stream = await loop.add_request(name, prompt(), params(3))
                assert [o.finished async for o in stream][-1]
        finally:
            await loop.shutdown()
    asyncio.run(serve_two())
    assert seen["step"] == {seen["build"]} and seen["warm_up"] == seen["build"]
    assert seen["build"] != threading.get_ident()


# ---------------------------------------------------------------------- request checks

def test_unknown_field_and_wrong_type_name_the_field():
    with pytest.raises(ValidationError) as info:
        CompletionRequest.model_validate_json('{"prompt": "x", "max_token": 5}')
    error = from_validation_error(info.value, CompletionRequest)
    assert (error.status, error.param) == (400, "max_token") and "max_tokens" in error.message
    with pytest.raises(ValidationError) as info:
        CompletionRequest.model_validate_json('{"prompt": "x", "max_tokens": "5"}')
    assert from_validation_error(info.value, CompletionRequest).param == "max_tokens"


@pytest.mark.parametrize("field,value", [
    ("n", 2), ("stop", ["\n"]), ("presence_penalty", 0.5), ("logprobs", 2), ("echo", True)])
def test_unimplemented_values_are_refused_with_422(field, value):
    request = CompletionRequest.model_validate({"prompt": "x", field: value})
    with pytest.raises(APIError) as info:
        check_supported(request)
    assert (info.value.status, info.value.param) == (422, field)


@pytest.mark.parametrize("field,value", [
    ("max_tokens", 0), ("temperature", -1), ("top_p", 0), ("top_k", -2),
    ("stop_token_ids", [-4])])
def test_out_of_range_values_are_refused_once_by_sampling_params_with_their_field(field, value):
    """The HTTP layer checks types only; SamplingParams checks the values and names the
    field, which the server's 400 names too."""
    request = CompletionRequest.model_validate({"prompt": "x", field: value})
    check_supported(request)                                   # no value check here
    with pytest.raises(InvalidValue) as info:
        sampling_params(request, 16 if request.max_tokens is None else request.max_tokens)
    error = from_engine_error(info.value)
    assert (error.status, error.param) == (400, field) and field in error.message


def test_engine_refusals_name_the_request_field():
    """The engine's parameter names become the request's: prompt token ids are the
    completion's `prompt`, and a chat's prompt is its `messages`."""
    vocab = InvalidValue("prompt_token_ids[1] = 99 is outside the vocabulary", "prompt_token_ids")
    assert from_engine_error(vocab).param == "prompt"
    long = InvalidValue("prompt too long", "prompt", code="context_length_exceeded")
    chat = from_engine_error(long, {"prompt": "messages"})
    assert (chat.param, chat.code) == ("messages", "context_length_exceeded")
    assert from_engine_error(vocab, {"prompt": "messages"}).param == "messages"
    assert from_engine_error(ValueError("no parameter known")).param is None


def test_neutral_values_that_clients_send_are_accepted():
    body = {"prompt": "x", "n": 1, "stop": None, "logprobs": None, "repetition_penalty": 1.0,
            "presence_penalty": 0, "echo": False, "best_of": 1, "user": "u", "ignore_eos": True}
    request = CompletionRequest.model_validate(body)
    check_supported(request)
    assert sampling_params(request, 16).max_tokens == 16


class CharTokenizer:
    chat_template = "yes"

    def __call__(self, text, add_special_tokens=True):
        return type("Encoding", (), {"input_ids": [ord(c) % 100 for c in text]})()

    def apply_chat_template(self, conversation, add_generation_prompt, tokenize):
        return "".join(f"<{m['role']}>{m['content']}" for m in conversation) + "<assistant>"


def test_prompt_lengths_and_max_tokens_against_the_context():
    builder = PromptBuilder(CharTokenizer(), max_model_len=20)
    assert builder.for_completion(CompletionRequest(prompt="abcd")).max_tokens == 16
    assert builder.for_completion(CompletionRequest(prompt="a" * 10)).max_tokens == 10
    chat = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    assert builder.for_chat(chat).max_tokens == 20 - len("<user>hi<assistant>")
    # a prompt with no room left is the engine's to refuse (max_tokens 1 reaches it)
    assert builder.for_completion(CompletionRequest(prompt="a" * 25)).max_tokens == 1
    for request, code in ((CompletionRequest(prompt="abc", max_tokens=18), "context_length_exceeded"),
                          (CompletionRequest(prompt=["a", "b"]), "unsupported_value")):
        with pytest.raises(APIError) as info:
            builder.for_completion(request)
        assert info.value.code == code and info.value.param in ("prompt", "max_tokens")


# ---------------------------------------------------------------------- responses, metrics

def test_text_delta_holds_back_half_a_character_until_the_end():
    assert text_delta("Hel", "Hello", finished=False) == "lo"
    assert text_delta("Hi ", "Hi \ufffd", finished=False) == ""
    assert text_delta("Hi ", "Hi \ufffd", finished=True) == "\ufffd"


def test_chunks_follow_openai_shapes():
    shape = ResponseShape(True, "r1", "m", 0, [1, 2, 3], return_token_ids=True,
                          include_usage=True)
    first = shape.chunk("He", [7], None, first=True)
    assert first["object"] == "chat.completion.chunk" and first["id"] == "chatcmpl-r1"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "He"}
    assert first["prompt_token_ids"] == [1, 2, 3] and first["usage"] is None
    last = shape.chunk("", [], "stop", first=False)
    assert last["choices"][0]["delta"] == {} and "prompt_token_ids" not in last
    assert shape.usage_chunk(4)["usage"] == {"prompt_tokens": 3, "completion_tokens": 4,
                                             "total_tokens": 7}
    full = ResponseShape(False, "r2", "m", 0, [1]).full("ok", [5, 6], "length")
    assert full["object"] == "text_completion" and full["choices"][0]["text"] == "ok"
    assert full["usage"]["completion_tokens"] == 2 and "token_ids" not in full["choices"][0]


def test_metrics_count_tokens_and_latencies():
    m = ServerMetrics("m")
    m.on_added("a", 5, received_at=10.0)
    for n, t, done in ((1, 10.5, False), (3, 10.7, True)):
        out = RequestOutput("a", None, [1] * 5, [CompletionOutput(0, "", [9] * n, "stop" if done else None)],
                            done, RequestMetrics(0.0, 0.1, 0.4, 0.6 if done else None, n))
        m.on_output(out, t)
    text = m.render().decode()
    assert 'minillm:generation_tokens_total{model_name="m"} 3.0' in text
    assert 'minillm:prompt_tokens_total{model_name="m"} 5.0' in text
    assert 'minillm:time_to_first_token_seconds_count{model_name="m"} 1.0' in text
    assert 'minillm:request_success_total{finished_reason="stop",model_name="m"} 1.0' in text
    record = m.log.find(["a"])[0]
    assert record["server_ttft_s"] == pytest.approx(0.5) and record["completion_tokens"] == 3
    assert record["engine_ttft_s"] == pytest.approx(0.4)
