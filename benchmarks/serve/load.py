"""Send a workload to a server at a request rate, every request streamed.

    results, duration = asyncio.run(run_load(base_url, payloads, offsets))

`offsets[i]` is when request i is sent, in seconds after the start: all zeros is a
burst (the server's queue takes everything at once: saturation), Poisson offsets
(`minillm.sim.workload.arrival_times`) model independent users at an average rate. Each
request runs in its own task, so a slow answer never delays the next send — exactly
what open-loop load means: the arrivals do not wait for the server. `max_concurrency`
caps requests in flight (closed loop), as `vllm bench serve --max-concurrency` does.

Everything is bounded: each request by `request_timeout`, the run by `run_timeout`
(requests still open then are cancelled and reported as failed).
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from benchmarks.serve.client import RequestResult, stream_request

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


async def run_load(base_url: str, payloads: list[dict], offsets: list[float], *,
                   endpoint: str = "completions", api_key: str | None = None,
                   max_concurrency: int | None = None, request_timeout: float = 600.0,
                   run_timeout: float = 3600.0, progress: bool = False):
    """→ (list of RequestResult in payload order, duration in seconds)."""
    url = base_url.rstrip("/") + ENDPOINTS[endpoint]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    bar = _bar(len(payloads), progress)
    start = time.perf_counter()

    async def one(i: int, payload: dict, client) -> RequestResult:
        delay = start + offsets[i] - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if gate is None:
            result = await stream_request(client, url, payload, i, headers)
        else:
            async with gate:
                result = await stream_request(client, url, payload, i, headers)
        bar.update(1)
        return result

    async with httpx.AsyncClient(timeout=request_timeout, limits=limits) as client:
        tasks = [asyncio.create_task(one(i, p, client)) for i, p in enumerate(payloads)]
        done, pending = await asyncio.wait(tasks, timeout=run_timeout)
        for task in pending:
            task.cancel()
        duration = time.perf_counter() - start
    bar.close()
    results = []
    for i, task in enumerate(tasks):
        if task in done and not task.cancelled() and task.exception() is None:
            results.append(task.result())
        else:
            results.append(RequestResult(i, error=f"not finished within {run_timeout:.0f} s"))
    return results, duration


def run_load_sync(*args, **kwargs):
    """`run_load` from ordinary code — also inside Jupyter, whose own event loop is
    already running in this thread (then the load runs in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_load(*args, **kwargs))
    outcome = {}

    def in_thread():
        try:
            outcome["value"] = asyncio.run(run_load(*args, **kwargs))
        except BaseException as error:          # re-raised in the caller's thread
            outcome["error"] = error
    thread = threading.Thread(target=in_thread, name="load")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _bar(total: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="requests", unit="req", disable=not enabled, leave=False)
