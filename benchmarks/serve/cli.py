"""Command line of the serving benchmark (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def parse_rates(text: str) -> list[float]:
    rates = [float(r) for r in text.split(",") if r]
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"request rates must be > 0 (or inf), got {text!r}")
    return rates


def build_parser() -> argparse.ArgumentParser:
    import benchmarks.serve as package
    p = argparse.ArgumentParser(prog="python -m benchmarks serve", description=package.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--compare-offline", action="store_true",
                   help="start minillm servers itself and compare with offline LLM.generate")
    p.add_argument("--model", default="smollm2-135m",
                   help="the model name sent in requests, and whose tokenizer cuts prompts")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--input-len", type=int, default=64, help="median prompt tokens")
    p.add_argument("--output-len", type=int, default=48, help="median output tokens")
    p.add_argument("--request-rate", type=parse_rates, default=[float("inf")],
                   help="comma-separated requests/s; inf = everything at once")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--goodput", nargs="*", default=None, help="SLOs, e.g. ttft:2000 tpot:100 (ms)")
    p.add_argument("--percentiles", default="50,90,99")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    p.add_argument("--max-num-seqs", type=int, default=16, help="--compare-offline engines")
    p.add_argument("--rounds", type=int, default=2,
                   help="--compare-offline: alternating offline/server rounds")
    p.add_argument("--vllm-python", default=os.environ.get("MINILLM_VLLM_PYTHON"),
                   help="--compare-offline: also drive `vllm serve` from this virtualenv")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.base_url) == args.compare_offline:
        parser.error("give either --base-url URL or --compare-offline")
    if args.num_prompts < 1:
        parser.error("--num-prompts must be >= 1")
    from benchmarks.serve.results import parse_slos
    try:
        args.slos = parse_slos(args.goodput)
        args.percentile_list = [float(q) for q in args.percentiles.split(",")]
    except ValueError as error:
        parser.error(str(error))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.compare_offline:
        from benchmarks.serve.compare import compare, report
        result = compare(args)
        print(report(result))
        path = out / "serve-compare.json"
    else:
        result = drive(args)
        path = out / "serve-results.json"
    path.write_text(json.dumps(result, indent=2, default=str))
    print(f"results: {path}")
    return 0


def drive(args) -> dict:
    """Run the workload at each rate against --base-url; print and return the summaries."""
    from benchmarks.serve.results import format_summary
    from benchmarks.serve.sweep import run_rate
    from benchmarks.serve.workload import ServeShape, load_tokenizer, payloads, workload
    from benchmarks.workloads import prompt_token_ids

    tokenizer, _ = load_tokenizer(args.model)
    shape = ServeShape(args.num_prompts, args.input_len, 4 * args.input_len,
                       args.output_len, 4 * args.output_len)
    specs = workload(shape, args.seed)
    prompts = prompt_token_ids(specs, len(tokenizer), tokenizer, args.seed)
    bodies = payloads(specs, prompts, args.model, args.endpoint, tokenizer)
    summaries = []
    for rate in args.request_rate:
        summary, _ = run_rate(args.base_url, bodies, rate, seed=args.seed, slos=args.slos,
                              percentiles=args.percentile_list, endpoint=args.endpoint,
                              api_key=args.api_key, max_concurrency=args.max_concurrency,
                              progress=not args.no_progress)
        summaries.append(summary)
        print(format_summary(summary, f"request rate {rate:g}/s"))
    if len(summaries) > 1:
        from benchmarks.serve.plots import plot_sweep
        from minillm.widgets.style import use_course_style
        use_course_style()
        png = Path(args.out) / "serve-sweep.png"
        plot_sweep({args.base_url: summaries}).savefig(png, bbox_inches="tight")
        print(f"plot: {png}")
    return {"base_url": args.base_url, "model": args.model, "endpoint": args.endpoint,
            "shape": vars(shape), "seed": args.seed, "slos_ms": args.slos, "runs": summaries}
