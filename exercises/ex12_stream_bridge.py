"""Lesson 12 — the stream bridge: engine outputs → a client's server-sent events.

Your turn: replace each `raise NotImplementedError` with your code, then run the check
cell at the end of lesson 12 (or `python -m minillm.grading 12`).

The engine loop produces, after every step, a `RequestOutput` per request whose
`outputs[0].text` / `.token_ids` are *cumulative* (everything generated so far). An
HTTP handler must turn that into a stream of small pieces for one client, and must
stop the request when the client goes away. Three pieces:

(a) `text_delta`    — the new text since the last chunk (careful with half characters);
(b) `LatestOutput`  — the mailbox between the engine loop and one handler: the loop
                      `put`s, the handler `await get()`s, `close()` aborts;
(c) `stream_events` — the handler's async generator: outputs in, SSE strings out,
                      `data: [DONE]` at the end, and an abort if the client leaves.

Part (c) is graded on minillm's real engine loop (`minillm.serving.AsyncEngine`) with
a tiny random Llama, so your generator runs exactly where the server's does.

The answer key's pieces: `minillm/serving/responses.py::text_delta` and `::sse`,
`minillm/serving/request_stream.py::RequestStream` (the mailbox) and
`minillm/serving/api_server.py::stream_events` (the handler's generator).
"""

from __future__ import annotations

import asyncio  # noqa: F401  (you will need it in part b)
import json  # noqa: F401  (you will need it in part c)

DONE = "data: [DONE]\n\n"
REPLACEMENT = "\ufffd"        # what decoding half of a UTF-8 character gives


# ---------------------------------------------------------------------- (a)

def text_delta(sent: str, text: str, finished: bool) -> str:
    """The part of `text` (the request's whole decoded output so far) not yet sent.

    `sent` is what earlier chunks carried; `text` starts with it. While the request runs
    (`finished` False), do not send trailing REPLACEMENT characters: the tokenizer
    produced the first bytes of a character whose last bytes come with the next token,
    and once sent, a wrong character cannot be taken back. When `finished` is True,
    return everything that is left.

    Examples: ("Hel", "Hello", False) → "lo"; ("Hi ", "Hi \ufffd", False) → "";
    ("Hi ", "Hi \ufffd", True) → "\ufffd".
    """
    raise NotImplementedError("Your turn: slice off what was sent; hold back a trailing '\\ufffd'")


# ---------------------------------------------------------------------- (b)

class LatestOutput:
    """The mailbox for ONE request: the engine loop puts, one handler gets.

    * `put(output)` — called by the engine loop after a step (never blocks). Outputs are
      cumulative, so keep only the newest one: a handler that reads slowly then gets
      several tokens at once, and memory per request stays constant.
    * `await get()` — wait until there is an output the handler has not seen, return the
      newest one. After a finished output (`output.finished`), set `self.finished`.
    * `close()` — the handler stops reading. If the request is not finished, call
      `abort(request_id)` (once) so the engine frees its KV blocks; set `self.finished`.

    An `asyncio.Event` is the tool: `set()` in put, `await wait()` then `clear()` in get.
    """

    def __init__(self, request_id: str, abort):
        self.request_id = request_id
        self.abort = abort                    # abort(request_id): ask the loop to abort it
        self.finished = False
        raise NotImplementedError("Your turn: the newest output, and an asyncio.Event")

    def put(self, output) -> None:
        raise NotImplementedError("Your turn: replace the newest output, wake the reader")

    async def get(self):
        raise NotImplementedError("Your turn: wait for a new output, return the newest")

    def close(self) -> None:
        raise NotImplementedError("Your turn: abort the request unless it finished")


# ---------------------------------------------------------------------- (c)

def sse(payload: dict) -> str:
    """One server-sent event: the line `data: <json>` and a blank line (given)."""
    return f"data: {json.dumps(payload)}\n\n"


async def stream_events(outputs, request_id: str):
    """Yield the SSE strings of one streamed /v1/completions answer.

    `outputs` is an async iterator of cumulative `RequestOutput`s for this request
    (`async for output in outputs`), ending after the finished one; it has a `close()`
    method that aborts the request if it is still running (minillm's `RequestStream`).

    For each output, compute the text delta (part a). Skip an output whose delta is
    empty unless it is the finished one. Otherwise yield
    `sse({"id": "cmpl-" + request_id, "object": "text_completion",
          "choices": [{"index": 0, "text": delta, "finish_reason": reason}]})`
    with `reason` = `output.outputs[0].finish_reason` on the finished output, None
    before. After the last output, yield DONE.

    If the consumer stops early (a client disconnect closes this generator: Python
    raises GeneratorExit at the `yield`), the request must be aborted: call
    `outputs.close()` in a `finally:` block (it does nothing once the request finished).
    """
    raise NotImplementedError("Your turn: async for output in outputs: ... finally: outputs.close()")
    yield  # makes this function an async generator
