"""Command line of the engine benchmark; see `benchmarks/__init__.py`."""

from __future__ import annotations

import argparse
import os
import sys

from benchmarks.common import BenchConfig
from benchmarks.registry import EXPERIMENTS


def positive_int(text: str) -> int:
    """argparse type: an int >= 1 (the flag's name comes with argparse's message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an int") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv=None) -> BenchConfig:
    """The flags as a `BenchConfig`; a bad flag exits with argparse's message, before
    anything is loaded."""
    import benchmarks as package
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=package.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small workloads and one round")
    parser.add_argument("--peers", action="store_true",
                        help="compare with transformers (and vLLM with --vllm-python)")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated experiments among {','.join(EXPERIMENTS)} "
                             "(default: all; with --peers: none)")
    parser.add_argument("--out", default="bench-results", help="folder for JSON and PNGs")
    parser.add_argument("--rounds", type=positive_int, default=None, help="alternating rounds (default 3, quick 1)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=positive_int, default=16)
    parser.add_argument("--chunk-budget", type=positive_int, default=256,
                        help="max_num_batched_tokens with chunked prefill")
    parser.add_argument("--vllm-python", default=os.environ.get("MINILLM_VLLM_PYTHON"),
                        help="python of a virtualenv where vLLM is installed")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.only is not None:
        chosen = tuple(e for e in args.only.split(",") if e)
        unknown = set(chosen) - set(EXPERIMENTS)
        if unknown:
            parser.error(f"unknown experiment(s) {sorted(unknown)}; choose from {tuple(EXPERIMENTS)}")
    else:
        chosen = () if args.peers else tuple(EXPERIMENTS)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    if args.vllm_python and not os.access(args.vllm_python, os.X_OK):
        parser.error(f"--vllm-python {args.vllm_python!r} is not an executable python "
                     "(see docs/performance.md for the vLLM virtualenv)")
    if args.only is not None and not chosen:
        parser.error(f"--only {args.only!r} names no experiment; choose from {tuple(EXPERIMENTS)}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out!r} is a file: give a folder for the JSON and PNGs")
    from minillm.model.loader import check_model_name
    try:
        check_model_name(args.model)
    except ValueError as err:
        parser.error(f"--model: {err}")
    return BenchConfig(model=args.model, quick=args.quick, rounds=rounds, seed=args.seed,
                       threads=args.threads, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
                       chunk_budget=args.chunk_budget, experiments=chosen, peers=args.peers,
                       vllm_python=args.vllm_python, out=args.out, progress=not args.no_progress)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "serve":          # the load generator for OpenAI-compatible servers
        from benchmarks.serve import main as serve
        return serve(argv[1:])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = parse_args(argv)
    from benchmarks.run import run_bench
    run_bench(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
