"""The engine loop: an `LLMEngine` driven by a server, one step at a time.

`LLM.generate` owns the engine for the length of a call. A server cannot work that way:
requests arrive at any moment over HTTP while others are decoding, and every client
wants its tokens as soon as they are sampled. `AsyncEngine` puts exactly one coroutine,
the **engine loop** (引擎循环), in charge of the engine:

    while the server runs:
        apply aborts, then admissions        ← handed over by request handlers
        nothing unfinished?  sleep until a handler wakes the loop
        outputs = step()                     ← in a worker thread (see below)
        hand each output to its request's RequestStream

* **Requests join the running batch at the next step** — that is continuous batching
  seen from outside: a handler never waits for the batch to drain.
* **Handlers never touch the engine.** The engine is not thread-safe and is not
  re-entrant, so `add_request` and `abort` only queue work for the loop and wake it.
  Admission (the engine's validation, e.g. a prompt that can never fit in the KV cache)
  happens in the loop between two steps, and its error goes back to the one handler
  that asked, before that handler has sent any response header.
* **Why a worker thread for `step()`**: a forward pass takes tens of milliseconds. Run
  on the event loop, it would freeze every HTTP connection for that long (no new
  requests accepted, no tokens written). Running `step()` on a worker thread lets the
  event loop keep serving sockets while PyTorch computes — PyTorch releases Python's GIL
  inside its kernels. Only the loop task awaits that thread and it never starts a second
  step before the first returns, so the engine is still used by one caller at a time:
  admissions and aborts run on the event-loop thread *between* steps, `step()` on the
  worker, never both at once.
* **Always the same worker** (`engine_thread.py`): the thread that loaded the model.
  PyTorch's OpenMP workers only wait efficiently for the next piece of work when the
  process has a single team of them, i.e. one thread that ever runs tensor code;
  `asyncio.to_thread` would hand consecutive steps to whichever pool thread is idle.
* **Streams keep only the latest output.** `RequestOutput.outputs[0].token_ids` is
  cumulative, so a stream holds the newest one, not a queue: a client that reads slowly
  receives several tokens in one chunk, and the server's memory per request stays
  constant however far behind it is.
* **Abort.** When a client disconnects, its handler calls `RequestStream.close()`; the
  loop aborts the request before the next step and the engine frees its KV blocks.
* **Backpressure (背压).** More than `max_queued_requests` waiting → `QueueFullError`,
  which the server answers with 503 + `Retry-After` instead of letting the queue (and
  everybody's TTFT) grow without bound.
* **Failures stay local.** A request the engine refuses fails alone (its handler gets
  the ValueError). If a *step* raises, the loop cannot know which sequence caused it:
  every request in the engine at that moment fails with `RequestFailed` and is aborted,
  and the loop goes on serving new requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace

from minillm.outputs import EngineStats
from minillm.serving.engine_thread import EngineThread
from minillm.serving.request_stream import RequestStream

log = logging.getLogger("minillm.serving")


class QueueFullError(Exception):
    """Too many requests waiting: shed this one (HTTP 503 with Retry-After)."""

    def __init__(self, num_queued: int, retry_after: int = 1):
        super().__init__(f"the server is overloaded: {num_queued} requests are already "
                         f"waiting; retry after {retry_after} s")
        self.retry_after = retry_after


class EngineDeadError(RuntimeError):
    """The engine loop has stopped (shutdown, or a bug in the loop itself)."""


class RequestFailed(RuntimeError):
    """A request the loop had to give up on (a failed step, or shutdown)."""


@dataclass
class _Admission:
    request_id: str
    prompt: dict
    params: object
    priority: int
    received_at: float
    future: asyncio.Future


class AsyncEngine:
    def __init__(self, engine, *, max_queued_requests: int = 256, observer=None,
                 engine_thread: EngineThread | None = None):
        self.engine = engine
        # give it the thread that built `engine`, as cli.build_server does (engine_thread.py)
        self.engine_thread = engine_thread or EngineThread()
        self.max_queued_requests = max_queued_requests
        self.observer = observer              # metrics.ServerMetrics, or None
        self.stats: EngineStats = engine.stats()    # refreshed after every step
        self.num_steps = 0
        self._streams: dict[str, RequestStream] = {}
        self._admissions: list[_Admission] = []
        self._aborts: dict[str, int] = {}     # request id -> step count when asked
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False
        self._dead: BaseException | None = None

    # ------------------------------------------------------------ handler side
    @property
    def num_queued(self) -> int:
        """Requests waiting: handed over but not admitted, plus the engine's queue."""
        return len(self._admissions) + self.stats.num_waiting

    @property
    def is_running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closing

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="minillm-engine-loop")

    async def add_request(self, request_id: str, prompt: dict, params, priority: int = 0,
                          received_at: float | None = None) -> RequestStream:
        """Hand a request to the loop; returns its stream once the engine accepted it.

        Raises QueueFullError (shed it), EngineDeadError, or the engine's own
        ValueError/TypeError for a request it refuses.
        """
        if not self.is_running:
            raise EngineDeadError("the server is shutting down" if self._closing
                                  else f"the engine loop has stopped: {self._dead!r}")
        if self.num_queued >= self.max_queued_requests:
            raise QueueFullError(self.num_queued)
        future = asyncio.get_running_loop().create_future()
        self._admissions.append(_Admission(request_id, prompt, params, priority,
                                           received_at or time.perf_counter(), future))
        self._wake.set()
        try:
            return await future
        except asyncio.CancelledError:        # the client left while we waited
            if not future.cancel() and future.exception() is None:
                self.abort(request_id)        # admitted just now: undo it
            raise

    def abort(self, request_id: str) -> None:
        """Ask the loop to abort a request before its next step (safe to repeat)."""
        self._aborts.setdefault(request_id, self.num_steps)
        self._wake.set()

    async def drain(self, timeout: float) -> bool:
        """Refuse new requests, let those in flight finish for up to `timeout` s.

        True if everything finished. The loop stops by itself once the engine is idle.
        """
        self._closing = True
        self._wake.set()
        if self._task is None:
            return True
        done, _ = await asyncio.wait({self._task}, timeout=timeout)
        return bool(done)

    async def shutdown(self) -> None:
        """Fail what is still in flight, let the current step finish, stop the loop."""
        self._closing = True
        for request_id, stream in list(self._streams.items()):
            stream.fail(RequestFailed("the server is shutting down"))
            self.abort(request_id)
        for admission in self._admissions:
            if not admission.future.done():
                admission.future.set_exception(EngineDeadError("the server is shutting down"))
        self._admissions.clear()
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    # ------------------------------------------------------------ the loop
    async def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                self._apply_aborts()
                self._apply_admissions()
                if not self.engine.has_unfinished_requests():
                    if self._closing:
                        return
                    await self._wake.wait()            # idle: sleep until a handler wakes us
                    continue
                await self._step()
        except BaseException as error:                 # a bug in the loop: fail loudly
            self._dead = error
            log.exception("the engine loop stopped")
            for stream in self._streams.values():
                stream.fail(EngineDeadError(f"the engine loop stopped: {error!r}"))
            raise
        finally:
            self.engine_thread.close()                 # a step still running finishes

    def _apply_aborts(self) -> None:
        if not self._aborts:
            return
        for request_id, asked_at_step in self._aborts.items():
            self._streams.pop(request_id, None)      # its reader has stopped, or was failed
            if self.engine.abort_request(request_id) and self.observer:
                self.observer.on_aborted(request_id, asked_at_step, self.num_steps)
        self._aborts.clear()
        self._refresh_stats()                  # blocks came back even if no step follows

    def _refresh_stats(self) -> None:
        self.stats = self.engine.stats()
        if self.observer:
            self.observer.on_step(self.stats)

    def _apply_admissions(self) -> None:
        admitted = 0
        for a in self._admissions:
            if a.future.done():                        # its client gave up waiting
                continue
            if self._closing:
                a.future.set_exception(EngineDeadError("the server is shutting down"))
                continue
            try:
                self.engine.add_request(a.request_id, a.prompt, a.params, priority=a.priority)
            except Exception as error:                 # this request only
                a.future.set_exception(error)
                continue
            stream = RequestStream(a.request_id, self.abort)
            self._streams[a.request_id] = stream
            admitted += 1
            if self.observer:
                self.observer.on_added(a.request_id, len(a.prompt["prompt_token_ids"]),
                                       a.received_at)
            a.future.set_result(stream)
        self._admissions.clear()
        # the snapshot is from before these joined: count them as waiting until next step
        self.stats = replace(self.stats, num_waiting=self.stats.num_waiting + admitted)

    def _step_in_thread(self):
        outputs = self.engine.step()
        return outputs, self.engine.stats()

    async def _step(self) -> None:
        try:
            outputs, self.stats = await self.engine_thread.run(self._step_in_thread)
        except Exception as error:
            log.exception("an engine step failed; failing the requests in the engine")
            self._fail_everyone_in_the_engine(error)
            return
        self.num_steps += 1
        now = time.perf_counter()
        if self.observer:
            self.observer.on_step(self.stats)
        for output in outputs:
            self._deliver(output, now)

    def _deliver(self, output, now: float) -> None:
        if self.observer:
            try:
                self.observer.on_output(output, now)
            except Exception:                          # metrics must never break serving
                log.exception("metrics failed for %s", output.request_id)
        stream = self._streams.get(output.request_id)
        if stream is None:                             # aborted meanwhile
            return
        if output.finished:
            del self._streams[output.request_id]
        stream.put(output)

    def _fail_everyone_in_the_engine(self, error: Exception) -> None:
        for request_id, stream in list(self._streams.items()):
            stream.fail(RequestFailed(f"the engine step failed ({type(error).__name__}: "
                                       f"{error}); this request was aborted"))
            self.engine.abort_request(request_id)
        self._streams.clear()
        self._refresh_stats()
