"""`python -m minillm serve`: build the engine, wrap it in the server, run uvicorn.

    python -m minillm serve --model smollm2-135m --port 8000
    python -m minillm serve --port 0        # a free port; the first line printed names it

The first stdout line is `minillm serve: listening on http://HOST:PORT` (what
`launcher.ServerProcess` waits for); `/health` answers 200 once the engine loop runs.
SIGINT / SIGTERM (Ctrl-C, `kill`): new requests get 503, running ones have
`--graceful-shutdown-timeout` seconds to finish, the rest are aborted (their clients get
an error event and `data: [DONE]`), then uvicorn closes the connections and the
process exits with status 0.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys


def bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket ourselves, so `--port 0` can report the port it got."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port} ({error.strerror}): choose "
                         "another --port, or --port 0 for a free one") from None
    return sock


def warm_up(engine) -> None:
    """One tiny request before serving: the first forward pass is always slow."""
    from minillm.sampling_params import SamplingParams
    engine.add_request("warm-up", {"prompt_token_ids": list(range(1, 9))},
                       SamplingParams(temperature=0.0, max_tokens=2))
    while engine.has_unfinished_requests():
        engine.step()


def serving_class():
    """uvicorn's Server, with the engine drained before connections are closed."""
    import uvicorn

    class EngineServer(uvicorn.Server):
        """On SIGINT/SIGTERM: refuse new requests (503), give running ones `grace` s to
        finish, fail the rest (each client gets an error event and `[DONE]`), and only
        then let uvicorn close the connections — so no stream is cut off mid-chunk."""

        def __init__(self, config, engine_loop, grace: float):
            super().__init__(config)
            self.engine_loop, self.grace = engine_loop, grace

        async def shutdown(self, sockets=None):
            await self.engine_loop.drain(self.grace)
            await self.engine_loop.shutdown()
            await super().shutdown(sockets)

    return EngineServer


def build_server(args):
    """(FastAPI app, AsyncEngine) for parsed arguments; the engine loop starts with the app."""
    from minillm.llm import load_engine
    from minillm.serving.api_server import build_app
    from minillm.serving.async_engine import AsyncEngine
    from minillm.serving.engine_thread import EngineThread
    from minillm.serving.metrics import ServerMetrics
    from minillm.serving.prompt_builder import PromptBuilder
    from minillm.serving.responses import text_delta

    thread = EngineThread()                  # every tensor operation runs there: see its file
    engine = thread.call(load_engine, args.model, args.engine_config)
    thread.call(warm_up, engine)
    metrics = ServerMetrics(args.served_model_name)
    loop = AsyncEngine(engine, max_queued_requests=args.max_queued_requests, observer=metrics,
                       engine_thread=thread)
    prompts = PromptBuilder(engine.tokenizer, engine.engine_config.max_model_len)
    # lesson 13's engine (--components exercises) streams with the learner's text_delta
    delta = getattr(engine, "text_delta", text_delta)
    app = build_app(loop, prompts, metrics, model_name=args.served_model_name,
                    api_key=args.api_key, text_delta=delta)
    return app, loop


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import uvicorn

    from minillm.serving.args import parse_args
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        args = parse_args(argv)                 # makes the flags (MINILLM_EXECUTOR read)
        sock = bind(args.host, args.port)
        app, engine_loop = build_server(args)
    except (ValueError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    print(f"minillm serve: listening on http://{host}:{port} "
          f"(model {args.served_model_name!r})", flush=True)
    config = uvicorn.Config(app, log_level=args.uvicorn_log_level, lifespan="on",
                            timeout_graceful_shutdown=args.graceful_shutdown_timeout)
    # uvicorn catches SIGINT/SIGTERM, shuts down gracefully, then re-raises the signal
    # to the handler that was there before: ours ends `run` quietly with exit code 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stopped_by_signal)
    try:
        serving_class()(config, engine_loop, args.graceful_shutdown_timeout).run(sockets=[sock])
    except StoppedBySignal:
        pass
    return 0


class StoppedBySignal(Exception):
    """The graceful shutdown after SIGINT/SIGTERM is complete."""


def _stopped_by_signal(signum, frame):
    raise StoppedBySignal(signum)


if __name__ == "__main__":
    sys.exit(main())
