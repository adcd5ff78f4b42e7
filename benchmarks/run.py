"""Run the chosen experiments, print their tables, write JSON and PNGs."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks.common import Bench, BenchConfig
from benchmarks.registry import EXPERIMENTS, PEERS


def machine_info(config: BenchConfig) -> dict:
    import torch
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": config.threads,
            "torch": torch.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu_kernels": cpu_kernels_info()}


def cpu_kernels_info() -> dict:
    """The C++ CPU kernels ("cpp" backend): what building them cost in this process
    (0.0 s: found in the cache), or why they are unavailable."""
    from minillm_cpu.kernels import CpuKernelsUnavailable, load
    try:
        kernels = load()
    except CpuKernelsUnavailable as err:
        return {"unavailable": str(err)}
    return {"build_s": round(kernels.build_seconds, 2), "library": str(kernels.path)}


def cpu_kernels_text(info: dict) -> str:
    if "unavailable" in info:
        return f"C++ CPU kernels unavailable ({info['unavailable'].splitlines()[0]})"
    if info["build_s"] == 0:
        return "C++ CPU kernels: from the cache (built by an earlier run)"
    return f"C++ CPU kernels: compiled in {info['build_s']:.1f} s (first use on this machine)"


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def chosen(config: BenchConfig) -> dict:
    """{name: experiment module} in run order: the chosen experiments, then the peers."""
    names = tuple(EXPERIMENTS) if config.experiments is None else config.experiments
    modules = {name: EXPERIMENTS[name] for name in names}
    return {**modules, **(PEERS if config.peers else {})}


def run_bench(config: BenchConfig, echo=print) -> dict:
    """Run everything `config` asks for; returns the results dict (also written as JSON)."""
    from tqdm.auto import tqdm
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(config)
    modules = chosen(config)
    total = sum(module.planned_runs(config) for module in modules.values())
    results = {"config": {k: (v if isinstance(v, (int, float, str, bool, type(None), tuple, list))
                              else type(v).__name__) for k, v in vars(config).items()},
               "machine": machine_info(config), "load_average_start": load_average()}
    started = time.perf_counter()
    with tqdm(total=total, desc="bench", unit="run", disable=not config.progress) as bar:
        bench.bar = bar
        for name, module in modules.items():
            bar.set_description(f"bench: {name}")
            results[name] = module.run(bench)
    results["load_average_end"] = load_average()
    results["wall_s"] = time.perf_counter() - started
    write(results, modules, out, echo)
    return results


def write(results: dict, modules: dict, out: Path, echo) -> None:
    """Print every table; write `<name>.png`, `bench.json` and the detached JSON files."""
    cfg, machine = results["config"], results["machine"]
    echo(f"\nminillm bench — model {cfg['model']}, {cfg['dtype']}, {machine['threads']} threads on "
         f"{machine['cpu']} ({machine['cores']} cores), {cfg['rounds']} round(s) alternating, "
         f"medians\nload average (1/5/15 min): {results['load_average_start']} at start, "
         f"{results['load_average_end']} at end; {results['wall_s']:.0f} s in all")
    if "cpu_kernels" in machine:
        echo(cpu_kernels_text(machine["cpu_kernels"]))
    echo("")
    plotted = [name for name, module in modules.items() if module.plot is not None]
    detached = {}                                  # (name, key) → the part taken out
    for name, module in modules.items():
        echo(module.text(results[name]) + "\n")
        if module.plot is not None:
            module.plot(results[name], out / f"{name}.png")
        for key, filename in getattr(module, "DETACHED", {}).items():
            detached[name, key] = results[name].pop(key)
            write_json(out / filename, detached[name, key])
    write_json(out / "bench.json", results)
    for (name, key), part in detached.items():     # the caller gets the whole result back
        results[name][key] = part
    echo(f"written: {out}/bench.json and " + ", ".join(f"{n}.png" for n in plotted))


def _clean(obj):
    """NaN → None and numpy scalars → Python numbers, recursively (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(_clean(data), indent=1))
