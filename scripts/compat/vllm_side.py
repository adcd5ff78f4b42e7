"""The half of `make compat` that runs inside vLLM's own virtualenv.

    /path/to/vllm-venv/bin/python scripts/compat/vllm_side.py < job.json > answer.json

It imports only the standard library and vllm (minillm is not installed there), reads
one JSON job on stdin and writes one JSON answer on stdout, after a marker line, so
vLLM's own log lines never get mixed into the answer. The job may ask for:

* `"parsers": true` — what vLLM's command lines accept: every option of `vllm serve`
  (the parser `vllm serve` itself builds: `make_arg_parser` on a
  `FlexibleArgumentParser`), with its destination, whether it takes a value, its
  choices; the fields of the `EngineArgs` and `FrontendArgs` dataclasses; the options
  of `vllm bench serve`;
* `"argvs": [[...], ...]` with `"model"` — command lines for `vllm serve MODEL ...`:
  each is parsed by vLLM's parser, turned into `EngineArgs` and then into the whole
  engine configuration (`create_engine_config`: the step that rejects a wrong value,
  such as an unknown speculative method, without starting an engine); the answer is
  "ok" or vLLM's own error message;
* `"scripts": [{"code", "function", "model"}, ...]` — a lesson's function, run here as
  `function(LLM, SamplingParams, model)` with vLLM's classes. `LLM` gets one default,
  `enforce_eager=True` (no graph capture or compilation: the engine starts in seconds
  rather than a minute, and the eager forward pass is what minillm computes too); every
  other argument is the lesson's own.

Each part is answered on its own: one that fails reports its error and the others run.
"""

import argparse
import contextlib
import dataclasses
import io
import json
import sys
import traceback

MARK = "@@compat@@ "


def serve_parser():
    """The parser of `vllm serve`, built the way vLLM's CLI builds it."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def bench_serve_parser():
    """The parser of `vllm bench serve`."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


def describe_options(parser) -> dict:
    """{option string: what it stores and how} for every option of `parser`."""
    options = {}
    for action in parser._actions:
        for option in action.option_strings:
            options[option] = {"dest": action.dest, "takes_value": action.nargs != 0,
                               "choices": sorted(map(str, action.choices)) if action.choices else None}
    return options


def field_names(cls) -> list[str]:
    return sorted(f.name for f in dataclasses.fields(cls))


def describe_parsers() -> dict:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs
    return {"serve": describe_options(serve_parser()),
            "bench_serve": describe_options(bench_serve_parser()),
            "engine_args": field_names(EngineArgs), "frontend_args": field_names(FrontendArgs)}


def try_argvs(argvs: list[list[str]], model: str) -> list[str]:
    """Check each command line as `vllm serve` would before starting the engine."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    parser = serve_parser()
    answers = []
    for argv in argvs:
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = parser.parse_args(["--model", model, *argv])
            AsyncEngineArgs.from_cli_args(args).create_engine_config()
            answers.append("ok")
        except SystemExit:
            lines = errors.getvalue().strip().splitlines()
            answers.append(lines[-1] if lines else "rejected by the parser")
        except Exception as error:                      # vLLM's configuration checks
            answers.append(f"{type(error).__name__}: {' '.join(str(error).split())[:300]}")
    return answers


def run_script(code: str, function: str, model: str) -> dict:
    """Define the lesson's code, call `function(LLM, SamplingParams, model)` with vLLM's."""
    import functools

    import vllm
    namespace = {"__name__": "lesson"}
    exec(compile(code, f"<lesson: {function}>", "exec"), namespace)
    llm_class = functools.partial(vllm.LLM, enforce_eager=True)
    return {"texts": namespace[function](llm_class, vllm.SamplingParams, model)}


def answer(job: dict) -> dict:
    import vllm
    out = {"version": vllm.__version__}
    parts = {"parsers": lambda: describe_parsers(),
             "argvs": lambda: try_argvs(job["argvs"], job["model"]),
             "scripts": lambda: [guarded(run_script, **s) for s in job["scripts"]]}
    for name, part in parts.items():
        if job.get(name):
            out[name] = guarded(part)
    return out


def guarded(fn, *args, **kwargs) -> dict:
    """{"ok": result} or {"error": the exception and the last lines of its traceback}."""
    try:
        return {"ok": fn(*args, **kwargs)}
    except Exception as error:
        tail = traceback.format_exc().strip().splitlines()[-6:]
        return {"error": f"{type(error).__name__}: {error}", "traceback": tail}


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    job = json.load(sys.stdin)
    result = answer(job)
    sys.stdout.write("\n" + MARK + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":          # vLLM's engine starts processes that re-import this file
    main()
