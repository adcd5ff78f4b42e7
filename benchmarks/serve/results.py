"""Client-side results, named as `vllm bench serve` names them, so numbers compare.

    completed, failed, duration, total_input_tokens, total_output_tokens,
    request_throughput (req/s), output_throughput (tok/s), total_token_throughput,
    request_goodput (req/s meeting every SLO),
    mean_/median_/std_/p50_/p90_/p99_  ×  ttft_ms, tpot_ms, itl_ms, e2el_ms

Goodput (有效吞吐) counts only requests that met the service-level objectives, given like
vLLM's `--goodput ttft:2000 tpot:100` (milliseconds): a server that answers fast but
blows the SLO for half its users has half the goodput of its throughput.
"""

from __future__ import annotations

import numpy as np

from benchmarks.serve.client import RequestResult

METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_METRICS = ("ttft", "tpot", "e2el")


def parse_slos(items: list[str] | None) -> dict[str, float]:
    """["ttft:2000", "tpot:100"] → {"ttft": 2000.0, "tpot": 100.0} (milliseconds)."""
    slos = {}
    for item in items or []:
        name, _, value = item.partition(":")
        if name not in SLO_METRICS or not value:
            raise ValueError(f"goodput SLO {item!r}: write NAME:MILLISECONDS with NAME one of "
                             f"{SLO_METRICS}, e.g. ttft:2000")
        slos[name] = float(value)
    return slos


def per_request_ms(r: RequestResult) -> dict[str, float | None]:
    tpot = r.tpot
    return {"ttft": 1e3 * r.ttft, "tpot": None if tpot is None else 1e3 * tpot,
            "e2el": 1e3 * r.latency}


def meets(r: RequestResult, slos: dict[str, float]) -> bool:
    values = per_request_ms(r)
    return all(values[k] is None or values[k] <= limit for k, limit in slos.items())


def summarize(results: list[RequestResult], duration: float,
              percentiles=(50, 90, 99), slos: dict[str, float] | None = None) -> dict:
    ok = [r for r in results if r.success]
    values = {"ttft": [1e3 * r.ttft for r in ok],
              "tpot": [1e3 * r.tpot for r in ok if r.tpot is not None],
              "itl": [1e3 * gap for r in ok for gap in r.itl],
              "e2el": [1e3 * r.latency for r in ok]}
    inputs, outputs = sum(r.prompt_tokens for r in ok), sum(r.output_tokens for r in ok)
    summary = {"completed": len(ok), "failed": len(results) - len(ok), "duration": duration,
               "total_input_tokens": inputs, "total_output_tokens": outputs,
               "request_throughput": len(ok) / duration,
               "output_throughput": outputs / duration,
               "total_token_throughput": (inputs + outputs) / duration,
               "request_goodput": (sum(meets(r, slos) for r in ok) / duration) if slos else None,
               "errors": sorted({r.error for r in results if not r.success})[:5]}
    for name in METRICS:
        xs = np.asarray(values[name], dtype=float)
        summary[f"mean_{name}_ms"] = float(xs.mean()) if xs.size else None
        summary[f"median_{name}_ms"] = float(np.median(xs)) if xs.size else None
        summary[f"std_{name}_ms"] = float(xs.std()) if xs.size else None
        for q in percentiles:
            label = f"{q:g}"
            summary[f"p{label}_{name}_ms"] = float(np.percentile(xs, q)) if xs.size else None
    return summary


def format_summary(s: dict, title: str = "") -> str:
    """A short human-readable block (the JSON has everything)."""
    def ms(key):
        return "-" if s.get(key) is None else f"{s[key]:.1f}"
    lines = [f"== {title} ==" if title else "",
             f"completed {s['completed']}, failed {s['failed']}, duration {s['duration']:.1f} s",
             f"request throughput {s['request_throughput']:.2f} req/s, "
             f"output {s['output_throughput']:.1f} tok/s"]
    if s.get("request_goodput") is not None:
        lines.append(f"goodput {s['request_goodput']:.2f} req/s")
    for name in METRICS:
        lines.append(f"{name.upper():5} ms  mean {ms(f'mean_{name}_ms')}  median "
                     f"{ms(f'median_{name}_ms')}  P99 {ms(f'p99_{name}_ms')}")
    if s.get("errors"):
        lines.append(f"errors: {s['errors']}")
    return "\n".join(line for line in lines if line)
