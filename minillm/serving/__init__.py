"""Online serving: `python -m minillm serve`, an OpenAI-compatible HTTP server.

Everything before lesson 12 runs offline: `LLM.generate` knows every prompt up front and
returns when the last one is done. A server is the setting continuous batching was
invented for: requests arrive over the network *while others are decoding*, and each
client wants its tokens the moment they are sampled. The pieces, one file each:

    args.py            the command line (vLLM's flag names where the knob exists)
    engine_factory.py  the ONE place that builds the engine, and reads its queue/KV numbers
    async_engine.py    the engine loop: one task steps the engine while work exists and
                       sleeps when idle; requests join at the next step; a disconnect aborts
    request_stream.py  one request's mailbox between the loop and its handler (newest output)
    protocol.py        what a request may contain (OpenAI's fields + a few of vLLM's),
                       checked before anything reaches the engine
    prompts.py         prompt text / chat messages → token ids (as LLM.generate / chat do)
    responses.py       OpenAI response and stream-chunk JSON, server-sent events, text deltas
    errors.py          OpenAI-style error bodies: {"error": {message, type, param, code}}
    metrics.py         Prometheus metrics (vLLM's meanings, `minillm:` prefix) + a request log
    api_server.py      the FastAPI routes
    cli.py             `python -m minillm serve ...`: builds it all and runs uvicorn
    launcher.py        start/stop a server subprocess (tests, lesson 12, the benchmark)

One request's path:

    POST /v1/chat/completions ─► protocol (400/422 on bad input) ─► prompts (token ids)
      ─► AsyncEngine.add_request ─► [engine loop] engine.add_request … engine.step()
      ─► RequestStream (latest output) ─► responses (SSE chunk) ─► the client
"""
