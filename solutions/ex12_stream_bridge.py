"""Lesson 12 — the stream bridge (graded answers). See exercises/ex12_stream_bridge.py."""

from __future__ import annotations

import asyncio
import json

DONE = "data: [DONE]\n\n"
REPLACEMENT = "\ufffd"


def text_delta(sent: str, text: str, finished: bool) -> str:
    new = text[len(sent):]
    if finished:
        return new
    return new.rstrip(REPLACEMENT)            # half a character: wait for the rest


class LatestOutput:
    def __init__(self, request_id: str, abort):
        self.request_id = request_id
        self.abort = abort
        self.finished = False
        self._newest = None
        self._changed = asyncio.Event()

    def put(self, output) -> None:
        self._newest = output                 # cumulative: the older one is contained in it
        self._changed.set()

    async def get(self):
        await self._changed.wait()
        self._changed.clear()
        output, self._newest = self._newest, None
        if output.finished:
            self.finished = True
        return output

    def close(self) -> None:
        if not self.finished:
            self.finished = True
            self.abort(self.request_id)


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


async def stream_events(outputs, request_id: str):
    sent = ""
    try:
        async for output in outputs:
            completion = output.outputs[0]
            delta = text_delta(sent, completion.text, output.finished)
            if not delta and not output.finished:
                continue
            reason = completion.finish_reason if output.finished else None
            yield sse({"id": "cmpl-" + request_id, "object": "text_completion",
                       "choices": [{"index": 0, "text": delta, "finish_reason": reason}]})
            sent += delta
        yield DONE
    finally:
        outputs.close()                       # a no-op when the request finished
