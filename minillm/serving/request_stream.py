"""One request's end of the bridge between the engine loop and its HTTP handler.

The engine loop `put`s each new `RequestOutput` of the request (cumulative: the whole
output so far); the handler iterates the stream and gets the newest one each time it
changed. Keeping only the newest — not a queue — is lossless because outputs are
cumulative, and it bounds memory per request however slowly the client reads: a slow
reader simply receives several tokens in one chunk. `close()` is how a handler says
"nobody is listening any more": the request is aborted before the engine's next step.
"""

from __future__ import annotations

import asyncio


class RequestStream:
    """One request's end of the bridge: the engine loop puts outputs, a handler reads.

    Iterate it (`async for out in stream`) to get the request's newest `RequestOutput`
    each time it changes; iteration stops after the finished one. Call `close()` when
    the reader stops early (client gone): that aborts the request.
    """

    def __init__(self, request_id: str, abort):
        self.request_id = request_id
        self.finished = False
        self._abort = abort
        self._latest = None
        self._error: Exception | None = None
        self._ready = asyncio.Event()

    def put(self, output) -> None:
        """The engine loop's side: the request's newest output (cumulative)."""
        self._latest = output
        self._ready.set()

    def fail(self, error: Exception) -> None:
        """The engine loop's side: the request will get no more outputs; the reader
        gets `error` instead."""
        self._error = error
        self._ready.set()

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.finished:
            raise StopAsyncIteration
        await self._ready.wait()
        self._ready.clear()
        if self._error is not None:
            self.finished = True
            raise self._error
        output, self._latest = self._latest, None
        self.finished = output.finished
        return output

    def close(self) -> None:
        """Stop reading; abort the request if the engine is still working on it."""
        if not self.finished:
            self.finished = True
            self._abort(self.request_id)
