"""`python -m minillm serve` command line: vLLM's flag names wherever the knob exists.

    python -m minillm serve --model smollm2-135m --port 8000 --max-num-seqs 16 \
        --enable-chunked-prefill --max-num-batched-tokens 256 --api-key secret

minillm's own knobs keep the `LLM(...)` keyword's name (`--scheduling static`,
`--num-kv-blocks`); the queue limit borrows SGLang's `--max-queued-requests`.
"""

from __future__ import annotations

import argparse
import os
import re

from minillm.scheduler import SCHEDULERS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minillm serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    flag = argparse.BooleanOptionalAction
    p.add_argument("--model", default="smollm2-135m", help="known name or local HF folder")
    p.add_argument("--served-model-name", default=None,
                   help="the name clients send as `model` (default: --model)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--api-key", default=os.environ.get("MINILLM_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/* (or $MINILLM_API_KEY)")
    # the engine (same meaning as LLM(...) and vLLM)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--enable-chunked-prefill", action=flag, default=False)
    p.add_argument("--enable-prefix-caching", action=flag, default=False)
    p.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--scheduling", choices=tuple(SCHEDULERS), default="continuous",
                   help="minillm: iteration-level (continuous) or request-level (static) "
                        "batching; 'continuous+contiguous' and 'static+paged' are lesson "
                        "05's other two corners")
    p.add_argument("--num-kv-blocks", type=int, default=None,
                   help="minillm: KV-cache blocks (vLLM: --num-gpu-blocks-override)")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None)
    p.add_argument("--seed", type=int, default=0)
    # the server
    p.add_argument("--max-queued-requests", type=int, default=256,
                   help="minillm (SGLang's name): waiting requests beyond this get 503 + "
                        "Retry-After (load shedding; vLLM: --max-num-queued-reqs, which "
                        "counts running requests too)")
    p.add_argument("--graceful-shutdown-timeout", type=float, default=10.0,
                   help="minillm: on SIGTERM, seconds to let running requests finish "
                        "before aborting (vLLM: --shutdown-timeout, default 0)")
    p.add_argument("--uvicorn-log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug", "trace"))
    return p


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("max_num_seqs", "block_size", "max_queued_requests"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {args.port}")
    if args.api_key == "":
        parser.error("--api-key is empty: give a key, or leave the flag out")
    args.served_model_name = args.served_model_name or str(args.model)
    check_engine_flags(parser, args)
    return args


# LLM(...) keyword -> the flag that sets it, where the two names differ
FLAG_OF_FIELD = {"policy": "--scheduling-policy"}


def check_engine_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check the engine's flags and the model name before anything loads (seconds, not
    the minute a model load can take); the message names the flag, not the keyword."""
    from minillm.config import EngineConfig
    from minillm.model_loader import check_model_name
    from minillm.serving.engine_factory import engine_kwargs
    try:
        EngineConfig.from_kwargs(engine_kwargs(args))
        check_model_name(args.model)
    except (TypeError, ValueError) as error:
        text = str(error)
        for field in sorted(engine_kwargs(args), key=len, reverse=True):
            flag = FLAG_OF_FIELD.get(field, "--" + field.replace("_", "-"))
            text = re.sub(rf"(?<![\w-]){field}(?!\w)", flag, text)
        parser.error(text)
