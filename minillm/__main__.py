"""Command line: `python -m minillm generate "..."` and `python -m minillm prepare`.

    python -m minillm generate "What is the capital of France?"
        chat template applied, greedy decoding; prints the answer and tokens/s
        (the engine's flags are the server's: --executor eager, --max-model-len, ...)
    python -m minillm prepare
        converts the default model into the local cache once (set-up runs this)
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _generate(args) -> int:
    from minillm import LLM, SamplingParams
    # every flag is checked before the model loads (seconds) — a typo fails at once
    params = _flag_errors(lambda: SamplingParams(temperature=args.temperature,
                                                 max_tokens=args.max_tokens))
    if not args.prompt.strip():
        raise ValueError("the prompt is empty: give a question or an instruction")
    llm = LLM.from_config(args.model, args.engine_config)
    start = time.perf_counter()
    out = llm.chat([{"role": "user", "content": args.prompt}], params, use_tqdm=False)[0]
    elapsed = time.perf_counter() - start
    completion = out.outputs[0]
    print(completion.text)
    n = len(completion.token_ids)
    print(f"[{n} tokens in {elapsed:.2f} s = {n / elapsed:.1f} tokens/s; "
          f"TTFT {out.metrics.ttft * 1000:.0f} ms; finish: {completion.finish_reason}; "
          f"executor {llm.llm_engine.config['executor']}]", file=sys.stderr)
    return 0


def _flag_errors(make):
    """Run a check; name the command-line flag (--max-tokens) instead of the field."""
    try:
        return make()
    except (TypeError, ValueError) as err:
        text = str(err)
        for field in ("max_tokens", "temperature"):
            text = text.replace(field, "--" + field.replace("_", "-"))
        raise ValueError(text) from None


def _prepare(args) -> int:
    from minillm.model.loader import load_hf_model
    start = time.perf_counter()
    load_hf_model(args.model)
    print(f"model {args.model!r} ready ({time.perf_counter() - start:.1f} s)")
    return 0


def _quiet_transformers() -> None:
    """No per-tensor progress bars from transformers in a terminal tool."""
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "serve":          # the OpenAI-compatible server (lesson 12)
        from minillm.serving.cli import main as serve
        return serve(argv[1:])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return _run(argv)
    except (ValueError, TypeError) as err:     # making the flags included (a misspelt
        print(f"error: {err}", file=sys.stderr)  # MINILLM_EXECUTOR is a ValueError)
        return 2


def _run(argv: list[str]) -> int:
    from minillm.serving.args import add_engine_flags, engine_config
    parser = argparse.ArgumentParser(prog="python -m minillm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="answer one prompt with the chat template")
    gen.add_argument("prompt")
    gen.add_argument("--model", default="smollm2-135m")
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0)
    add_engine_flags(gen)                       # --max-num-seqs, --executor, --seed, ...
    gen.set_defaults(func=_generate)
    prep = sub.add_parser("prepare", help="convert the model into the local cache")
    prep.add_argument("--model", default="smollm2-135m")
    prep.set_defaults(func=_prepare)
    args = parser.parse_args(argv)
    if args.command == "generate":
        args.engine_config = engine_config(gen, args)
    _quiet_transformers()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
