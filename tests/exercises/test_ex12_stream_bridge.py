"""Lesson 12 exercise: the stream bridge. (a) and (b) on hand-made outputs; (c) on
minillm's real engine loop (AsyncEngine) driving a tiny random Llama."""

from __future__ import annotations

import asyncio
import json

import pytest

from minillm.outputs import CompletionOutput, RequestOutput

EXERCISE = "ex12_stream_bridge"


def output(text, finished=False, reason=None, rid="r"):
    return RequestOutput(rid, None, [1, 2], [CompletionOutput(0, text, [7] * len(text), reason)],
                         finished)


class Outputs:
    """An async iterator of outputs with close(), like minillm's RequestStream."""

    def __init__(self, items):
        self.items, self.closed = list(items), 0

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.items:
            raise StopAsyncIteration
        await asyncio.sleep(0)
        return self.items.pop(0)

    def close(self):
        self.closed += 1


def events(chunks):
    assert chunks[-1] == "data: [DONE]\n\n", chunks[-1:]
    parsed = []
    for chunk in chunks[:-1]:
        assert chunk.startswith("data: ") and chunk.endswith("\n\n"), chunk
        parsed.append(json.loads(chunk[len("data: "):]))
    return parsed


def test_text_delta(ex):
    assert ex.text_delta("", "Hello", False) == "Hello"
    assert ex.text_delta("Hel", "Hello", False) == "lo"
    assert ex.text_delta("Hi ", "Hi \ufffd", False) == ""
    assert ex.text_delta("Hi ", "Hi \ufffd\ufffd", False) == ""
    assert ex.text_delta("Hi ", "Hi \ufffd", True) == "\ufffd"
    assert ex.text_delta("Hi ", "Hi 你", False) == "你"
    assert ex.text_delta("ab", "ab", True) == ""


def test_latest_output_keeps_the_newest_and_aborts_on_close(ex):
    async def scenario():
        aborted = []
        box = ex.LatestOutput("r1", aborted.append)
        box.put(output("a"))
        box.put(output("ab"))                      # the reader was slow: it gets only "ab"
        assert (await box.get()).outputs[0].text == "ab"
        reader = asyncio.create_task(box.get())
        await asyncio.sleep(0.01)
        assert not reader.done(), "get() must wait for a new output"
        box.put(output("abc"))
        assert (await asyncio.wait_for(reader, 5)).outputs[0].text == "abc"
        assert not box.finished
        box.close()
        box.close()
        assert aborted == ["r1"] and box.finished

        done_box = ex.LatestOutput("r2", aborted.append)
        done_box.put(output("xyz", finished=True, reason="stop"))
        assert (await done_box.get()).finished and done_box.finished
        done_box.close()
        assert aborted == ["r1"], "a finished request is not aborted"
    asyncio.run(scenario())


def test_stream_events_send_deltas_then_done(ex):
    async def scenario():
        outs = Outputs([output("He"), output("He\ufffd"), output("Hel\u00e9"),
                        output("Hel\u00e9!", finished=True, reason="length")])
        chunks = [c async for c in ex.stream_events(outs, "abc")]
        return chunks, outs.closed
    chunks, closed = asyncio.run(scenario())
    parsed = events(chunks)
    assert [p["choices"][0]["text"] for p in parsed] == ["He", "l\u00e9", "!"]
    assert [p["choices"][0]["finish_reason"] for p in parsed] == [None, None, "length"]
    assert all(p["id"] == "cmpl-abc" and p["object"] == "text_completion" for p in parsed)
    assert closed >= 1, "close() the outputs when done (a no-op once finished)"


def test_a_client_that_leaves_early_aborts_the_request(ex):
    async def scenario():
        outs = Outputs([output("a"), output("ab"), output("abc"), output("abcd", True, "stop")])
        gen = ex.stream_events(outs, "r")
        first = await gen.__anext__()
        await gen.aclose()                         # what a disconnect does to the generator
        return first, outs
    first, outs = asyncio.run(scenario())
    assert json.loads(first[len("data: "):])["choices"][0]["text"] == "a"
    assert outs.closed >= 1 and len(outs.items) == 3


class LetterTokenizer:
    """Token id → a letter (and back); enough for the engine to decode its outputs."""

    eos_token_id = None

    def __call__(self, text, add_special_tokens=True):
        return type("Encoding", (), {"input_ids": [ord(c) - 97 for c in text]})()

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(97 + i % 26) for i in ids)


@pytest.fixture(scope="module")
def tiny_llm():
    from minillm import LLM
    from minillm.model.tiny import build_tiny_llama
    return LLM(build_tiny_llama(seed=0), tokenizer=LetterTokenizer(), max_num_seqs=4,
               num_kv_blocks=32, block_size=8)


def test_stream_events_on_the_real_engine_loop(ex, tiny_llm):
    from minillm import SamplingParams
    from minillm.serving.async_engine import AsyncEngine
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompt = {"prompt_token_ids": [5, 6, 7, 8]}
    expected = tiny_llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].text
    engine = tiny_llm.llm_engine

    async def scenario():
        loop = AsyncEngine(engine)
        await loop.start()
        try:
            full = [c async for c in ex.stream_events(await loop.add_request("full", prompt, params), "full")]
            gen = ex.stream_events(await loop.add_request("left", prompt, params), "left")
            await gen.__anext__()
            await gen.aclose()                     # the client disconnected
            for _ in range(200):
                if not engine.has_unfinished_requests():
                    break
                await asyncio.sleep(0.01)
            return full, engine.has_unfinished_requests(), loop.stats
        finally:
            await loop.shutdown()
    full, still_running, stats = asyncio.run(scenario())
    parsed = events(full)
    assert "".join(p["choices"][0]["text"] for p in parsed) == expected
    assert parsed[-1]["choices"][0]["finish_reason"] == "length"
    assert not still_running, "the abandoned request must be aborted"
    assert stats.num_free_blocks == stats.num_blocks
