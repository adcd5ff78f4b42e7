r"""`python -m minillm serve` command line: vLLM's flag names wherever the knob exists.

    python -m minillm serve --model smollm2-135m --port 8000 --max-num-seqs 16 \
        --enable-chunked-prefill --max-num-batched-tokens 256 --api-key secret

The engine's flags are not declared here: `add_engine_flags` makes one per field of
`EngineConfig` (`minillm/config.py`), with its default, its help and, where the field
says so, another flag name (`policy` → `--scheduling-policy`) or a list of choices.
A help that begins with "minillm" marks a knob vLLM does not have. `python -m minillm
generate` takes the same engine flags. The server's own flags (address, key, queue)
are below; the queue limit borrows SGLang's `--max-queued-requests`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import fields

from minillm.config import EngineConfig


def flag_name(field) -> str:
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per command-line field of EngineConfig (see the module docstring)."""
    for field in fields(EngineConfig):
        meta = field.metadata
        if not meta.get("cli", True):
            continue
        kwargs = {"dest": field.name, "help": meta["help"], "default": field.default}
        if field.type == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _value_type(field)
            kwargs["choices"] = _choices(meta.get("choices"))
        parser.add_argument(flag_name(field), **kwargs)


def _value_type(field):
    """How the flag's text becomes the field's value."""
    if field.name == "speculative_config":
        return json.loads                                  # vLLM's: a JSON object
    if field.type.startswith("int"):
        return int
    return float if field.type.startswith("float") else str


def _choices(choices):
    """A field's choices: a tuple, or the name of a registry read at parse time."""
    if choices == "schedulers":
        from minillm.scheduler import SCHEDULERS
        return tuple(SCHEDULERS)
    if choices == "executors":
        from minillm.model.executor import executor_names
        return executor_names()
    return choices


def engine_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> EngineConfig:
    """The EngineConfig of parsed flags, checked before anything loads (seconds, not the
    minute a model load can take); an error names the flag, not the field."""
    from minillm.model.loader import check_model_name
    knobs = {f.name: getattr(args, f.name) for f in fields(EngineConfig) if hasattr(args, f.name)}
    try:
        config = EngineConfig.from_kwargs(knobs)
        check_model_name(args.model)
    except (TypeError, ValueError) as error:
        text = str(error)
        for field in sorted(fields(EngineConfig), key=lambda f: len(f.name), reverse=True):
            if field.name in knobs:
                text = re.sub(rf"(?<![\w-]){field.name}(?!\w)", flag_name(field), text)
        parser.error(text)
    return config


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minillm serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="known name or local HF folder")
    p.add_argument("--served-model-name", default=None,
                   help="the name clients send as `model` (default: --model)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--api-key", default=os.environ.get("MINILLM_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/* (or $MINILLM_API_KEY)")
    add_engine_flags(p)
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
    """The parsed flags, with `args.engine_config` the checked EngineConfig."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_queued_requests < 1:
        parser.error(f"--max-queued-requests must be >= 1, got {args.max_queued_requests}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {args.port}")
    if args.api_key == "":
        parser.error("--api-key is empty: give a key, or leave the flag out")
    args.served_model_name = args.served_model_name or str(args.model)
    args.engine_config = engine_config(parser, args)
    return args
