"""Run the chosen experiments, print their tables, write JSON and PNGs."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from minillm.bench import experiments, report


def machine_info(config) -> dict:
    import torch
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": config.threads,
            "torch": torch.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run_bench(config: experiments.BenchConfig, echo=print) -> dict:
    """Run everything `config` asks for; returns the results dict (also written as JSON)."""
    from tqdm.auto import tqdm
    from minillm.bench import peers as peers_mod
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = experiments.Bench(config)
    names = list(config.experiments) + (["peers"] if config.peers else [])
    total = bench.planned_runs() + (peers_mod.planned_runs(config) if config.peers else 0)
    results = {"config": {k: (v if isinstance(v, (int, float, str, bool, type(None), tuple, list))
                              else type(v).__name__) for k, v in vars(config).items()},
               "machine": machine_info(config), "load_average_start": load_average()}
    started = time.perf_counter()
    with tqdm(total=total, desc="bench", unit="run", disable=not config.progress) as bar:
        bench.bar = bar
        for name in names:
            bar.set_description(f"bench: {name}")
            fn = peers_mod.peers if name == "peers" else experiments.RUNNERS[name]
            results[name] = fn(bench)
    results["load_average_end"] = load_average()
    results["wall_s"] = time.perf_counter() - started
    _write(results, names, out, echo)
    return results


def _write(results: dict, names: list[str], out: Path, echo) -> None:
    cfg, machine = results["config"], results["machine"]
    echo(f"\nminillm bench — model {cfg['model']}, {cfg['dtype']}, {machine['threads']} threads on "
         f"{machine['cpu']} ({machine['cores']} cores), {cfg['rounds']} round(s) alternating, "
         f"medians\nload average (1/5/15 min): {results['load_average_start']} at start, "
         f"{results['load_average_end']} at end; {results['wall_s']:.0f} s in all\n")
    for name in names:
        echo(report.TEXT[name](results[name]) + "\n")
        if name in report.PLOTS:
            report.PLOTS[name](results[name], out / f"{name}.png")
    traces = results.get("throughput", {}).pop("traces", None)
    if traces:
        report.write_json(out / "throughput-traces.json", traces)
    report.write_json(out / "bench.json", results)
    if traces:
        results["throughput"]["traces"] = traces
    echo(f"written: {out}/bench.json and " + ", ".join(f"{n}.png" for n in names if n in report.PLOTS))
