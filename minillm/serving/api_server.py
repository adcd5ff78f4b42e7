"""The HTTP routes: FastAPI over the engine loop.

    POST /v1/completions        text in, text out (`prompt`: a string or token ids)
    POST /v1/chat/completions   messages in (the model's chat template), a message out
    GET  /v1/models             the one model this server serves
    GET  /health                200 while the engine loop runs, 503 otherwise
    GET  /metrics               Prometheus text (metrics.py)
    GET  /minillm/requests      per-request timings of recent requests (minillm only)

Both POST routes stream with `"stream": true` (server-sent events, responses.py). A
handler never calls the engine: it checks the request (protocol.py, prompt_builder.py), hands
it to the engine loop (`AsyncEngine.add_request`), and relays what comes back. If the
client disconnects — mid-stream, or while a non-streamed answer is being generated —
the request is aborted and its KV blocks go back to the pool before the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from minillm.engine.components import ComponentError
from minillm.sampling_params import SamplingParams
from minillm.serving.async_engine import EngineDeadError, QueueFullError, RequestFailed
from minillm.serving.errors import (APIError, error_body, from_engine_error,
                                    from_validation_error)
from minillm.serving.protocol import ChatCompletionRequest, CompletionRequest, check_supported
from minillm.serving.responses import DONE, ResponseShape, sse, text_delta

MAX_BODY_BYTES = 4 * 1024 * 1024


class EngineStreamResponse(StreamingResponse):
    """A streamed answer that aborts its request however the response ends."""

    def __init__(self, events, stream):
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache"})
        self.request_stream = stream

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)   # a disconnect cancels this
        finally:
            self.request_stream.close()                     # no-op when it finished


def build_app(engine, prompts, metrics, *, model_name: str, api_key: str | None = None,
              text_delta=text_delta):
    """The FastAPI app; `engine` is an AsyncEngine, started and stopped with the app.
    `text_delta` cuts a stream's next piece (lesson 13's engine passes the learner's)."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await engine.start()
        yield
        await engine.shutdown()

    app = FastAPI(title="minillm", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.text_delta = text_delta

    @app.exception_handler(APIError)
    async def api_error(request, error: APIError):
        return error.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error):
        message = f"{request.method} {request.url.path}: {error.detail}"
        return JSONResponse(error_body(error.status_code, message), status_code=error.status_code)

    keyed = [Depends(key_check(api_key))]
    add_status_routes(app, engine, prompts, metrics, model_name, keyed)
    add_generation_routes(app, engine, prompts, metrics, model_name, keyed)
    return app


def key_check(api_key: str | None):
    """The dependency that enforces `Authorization: Bearer <api_key>` (None: open)."""
    def require_key(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        if header != f"Bearer {api_key}":
            what = "is missing" if not header else "is wrong"
            raise APIError(401, f"the API key {what}: send the header 'Authorization: Bearer "
                           "<key>' with the key the server was started with", code="invalid_api_key")
    return require_key


def add_status_routes(app, engine, prompts, metrics, model_name: str, keyed: list) -> None:
    """/health, /metrics, /minillm/requests and /v1/models."""
    created = int(time.time())

    @app.get("/health")
    async def health():
        if not engine.is_running:
            return JSONResponse(error_body(503, "the engine loop is not running"), status_code=503)
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/minillm/requests", dependencies=keyed)
    async def recent_requests(ids: str | None = None):
        return {"requests": metrics.log.find(ids.split(",") if ids else None)}

    @app.get("/v1/models", dependencies=keyed)
    async def models():
        card = {"id": model_name, "object": "model", "created": created, "owned_by": "minillm",
                "max_model_len": prompts.max_model_len}
        return {"object": "list", "data": [card]}


def add_generation_routes(app, engine, prompts, metrics, model_name: str, keyed: list) -> None:
    """POST /v1/completions and /v1/chat/completions."""

    @app.post("/v1/completions", dependencies=keyed)
    async def completions(request: Request):
        received = time.perf_counter()
        body = await parse(request, CompletionRequest, model_name)
        return await serve(engine, metrics, request, body, prompts.for_completion(body),
                           chat=False, model_name=model_name, received=received)

    @app.post("/v1/chat/completions", dependencies=keyed)
    async def chat_completions(request: Request):
        received = time.perf_counter()
        body = await parse(request, ChatCompletionRequest, model_name)
        return await serve(engine, metrics, request, body, prompts.for_chat(body),
                           chat=True, model_name=model_name, received=received)


async def parse(request: Request, model_cls, model_name: str):
    """The request's body as `model_cls`, its shape checked (protocol.py)."""
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise APIError(413, f"the request body is {len(body)} bytes; the limit is "
                       f"{MAX_BODY_BYTES}", code="request_too_large")
    try:
        parsed = model_cls.model_validate_json(body)
    except ValidationError as error:
        if error.errors()[0]["type"] in ("json_invalid", "json_type", "model_type"):
            raise APIError(400, "the body is not a JSON object: send e.g. "
                           '{"model": "...", "prompt": "Hello"} with Content-Type: '
                           "application/json", code="invalid_json") from None
        raise from_validation_error(error, model_cls) from None
    if parsed.model is not None and parsed.model != model_name:
        raise APIError(404, f"model {parsed.model!r} is not served here; this server "
                       f"serves {model_name!r} (see GET /v1/models)", param="model",
                       code="model_not_found")
    check_supported(parsed)
    return parsed


async def serve(engine, metrics, request, body, prompt, *, chat: bool, model_name: str,
                received: float):
    """Hand one checked request to the engine loop; its streamed or full answer."""
    try:
        params = sampling_params(body, prompt.max_tokens)
    except (ValueError, TypeError) as error:
        raise from_engine_error(error, prompt.fields) from None
    request_id = uuid.uuid4().hex[:16]
    shape = ResponseShape(chat, request_id, model_name, int(time.time()), prompt.token_ids,
                          body.return_token_ids,
                          bool(body.stream_options and body.stream_options.include_usage))
    engine_prompt = {"prompt_token_ids": prompt.token_ids, "prompt": prompt.text}
    try:
        stream = await engine.add_request(request_id, engine_prompt, params, body.priority,
                                          received)
    except QueueFullError as error:
        metrics.on_shed()
        raise APIError(503, str(error), code="queue_full",
                       headers={"Retry-After": str(error.retry_after)}) from None
    except EngineDeadError as error:
        raise APIError(503, str(error), code="unavailable") from None
    except (ValueError, TypeError) as error:          # the engine refused it
        raise from_engine_error(error, prompt.fields) from None
    if body.stream:
        return EngineStreamResponse(stream_events(stream, shape, request.app.state.text_delta),
                                    stream)
    return await full_answer(request, stream, shape)


def sampling_params(body, max_tokens: int) -> SamplingParams:
    """The request's sampling fields → SamplingParams (OpenAI's default temperature 1),
    which checks their values."""
    return SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=0 if body.top_k is None else body.top_k, max_tokens=max_tokens,
        ignore_eos=body.ignore_eos, stop_token_ids=body.stop_token_ids, seed=body.seed)


async def stream_events(stream, shape: ResponseShape, text_delta=text_delta):
    """RequestStream → server-sent events: a chunk whenever there is new text."""
    sent_text, num_sent_tokens, first = "", 0, True
    try:
        async for output in stream:
            completion = output.outputs[0]
            delta = text_delta(sent_text, completion.text, output.finished)
            if not delta and not output.finished:
                continue                       # half a character: wait for the next token
            reason = completion.finish_reason if output.finished else None
            if reason == "error":                  # the engine failed on this request alone
                raise RequestFailed("the engine failed while generating this request")
            yield sse(shape.chunk(delta, completion.token_ids[num_sent_tokens:], reason, first))
            sent_text, num_sent_tokens, first = sent_text + delta, len(completion.token_ids), False
    except (RequestFailed, EngineDeadError, ComponentError) as error:
        # (ComponentError: a learner's text_delta disagreed with the answer key, lesson 13)
        yield sse(error_body(503 if isinstance(error, EngineDeadError) else 500, str(error)))
        yield DONE
        return
    if shape.include_usage:
        yield sse(shape.usage_chunk(num_sent_tokens))
    yield DONE


async def full_answer(request: Request, stream, shape: ResponseShape):
    """Wait for the finished output — or for the client to hang up, then abort."""
    async def last_output():
        final = None
        async for output in stream:
            final = output
        return final

    async def hang_up():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    answer, gone = asyncio.ensure_future(last_output()), asyncio.ensure_future(hang_up())
    try:
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not answer.done():
            answer.cancel()
        stream.close()
    if not answer.done() or answer.cancelled():
        return Response(status_code=499)       # nobody is listening any more
    try:
        final = answer.result()
    except (RequestFailed, EngineDeadError) as error:
        raise APIError(500, str(error)) from None
    completion = final.outputs[0]
    if completion.finish_reason == "error":
        raise APIError(500, "the engine failed while generating this request")
    return JSONResponse(shape.full(completion.text, completion.token_ids, completion.finish_reason))
