"""Online serving: `python -m minillm serve`, an OpenAI-compatible HTTP server.

Everything before lesson 12 runs offline: `LLM.generate` knows every prompt up front and
returns when the last one is done. A server is the setting continuous batching was
invented for: requests arrive over the network *while others are decoding*, and each
client wants its tokens the moment they are sampled. The pieces, one file each:

    args.py            the command line: the engine's flags made from EngineConfig's fields
                       (vLLM's names where the knob exists), and the server's own
    async_engine.py    the engine loop: one task steps the engine while work exists and
                       sleeps when idle; requests join at the next step; a disconnect aborts
    engine_thread.py   the one worker thread every tensor operation of the server runs on
    request_stream.py  one request's mailbox between the loop and its handler (newest output)
    protocol.py        what a request may contain (OpenAI's fields + a few of vLLM's),
                       checked before anything reaches the engine
    prompt_builder.py  prompt text / chat messages → token ids (as LLM.generate / chat
                       do), and max_tokens
    responses.py       OpenAI response and stream-chunk JSON, server-sent events, text deltas
    errors.py          OpenAI-style error bodies: {"error": {message, type, param, code}}
    metrics.py         Prometheus metrics (vLLM's meanings, `minillm:` prefix) + a request log
    api_server.py      the FastAPI routes
    cli.py             `python -m minillm serve ...`: builds the engine (`load_engine`,
                       as `LLM` does), wraps it, and runs uvicorn
    launcher.py        start/stop a server subprocess (tests, lesson 12, the benchmark)

One request's path:

    POST /v1/chat/completions ─► protocol (400/422 on bad input) ─► prompt_builder (ids)
      ─► AsyncEngine.add_request ─► [engine loop] engine.add_request … engine.step()
      ─► RequestStream (latest output) ─► responses (SSE chunk) ─► the client
"""
