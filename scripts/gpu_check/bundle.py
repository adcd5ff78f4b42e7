"""OUT_DIR: few files, simple names (a lent GPU machine sends back at most 8, two folders deep).

    summary.json   mode, device, versions, every check (passed / failed / skipped, why),
                   the acceptance targets, headline numbers, what each part took
    results.json   every part's full result: every number measured
    junit.xml      the pytest runs (kernel tests, oracle) merged into one <testsuites>
    log.txt        everything printed
    plots.zip      the PNGs (kernels, decode curve, throughput, chunked)
    lessons.zip    the executed notebooks, outputs included (GPU mode)

The summary is also printed last, as a table, so that the end of the output alone says
what passed.
"""

from __future__ import annotations

import json
import math
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path


def part_status(result: dict) -> str:
    statuses = [c["status"] for c in result["checks"]]
    if "failed" in statuses:
        return "failed"
    return "passed" if "passed" in statuses else "skipped"


def clean(obj):
    """JSON without NaN/inf (they are not JSON): None instead."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(clean(data), indent=1, default=str, allow_nan=False) + "\n")


def merge_junit(files: list[Path], target: Path) -> bool:
    """One <testsuites> holding every file's <testsuite>s; False when there is none."""
    suites = ET.Element("testsuites")
    for path in files:
        root = ET.parse(path).getroot()
        suites.extend(list(root) if root.tag == "testsuites" else [root])
    if not len(suites):
        return False
    ET.ElementTree(suites).write(target, encoding="utf-8", xml_declaration=True)
    return True


def zip_folder(folder: Path, pattern: str, target: Path) -> bool:
    files = sorted(folder.glob(pattern)) if folder.is_dir() else []
    if not files:
        return False
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, path.name)
    return True


def summarize(mode: str, setup: dict, results: dict, started: float) -> dict:
    env = results["environment"].get("data", {})
    checks = [{**c, "part": name} for name, r in results.items() for c in r["checks"]]
    for c in checks:
        c.pop("traceback", None)
    failed = [c["name"] for c in checks if c["status"] == "failed"]
    device = (f"{env['gpu']} (compute capability {env['capability']})" if env.get("gpu")
              else f"CPU, {env.get('cpu_count')} cores")
    return {
        "mode": mode,
        "banner": ("GPU MODE: kernels compiled and the engine run on the GPU" if mode == "gpu" else
                   "CPU MODE: no CUDA GPU; toy sizes, interpreter kernels, GPU parts skipped"),
        "status": "failed" if failed else "passed",
        "failed": failed,
        "device": device,
        "versions": {k: env.get(k) for k in ("python", "torch", "torch_cuda", "version_triton",
                                              "version_transformers", "nvidia_smi")},
        "engine_default": {k: env.get(k) for k in ("engine_device", "engine_dtype", "dtype_note")},
        "pins_differing": [f"{p['name']} {p['installed']} (pinned {p['pinned']})"
                           for p in env.get("pins", []) if p["needed_here"] and not p["same"]],
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
        "setup": setup,
        "parts": {name: {"status": part_status(r), "wall_s": r["wall_s"]} for name, r in results.items()},
        "checks": checks,
        "skipped": [{"name": c["name"], "reason": c["reason"]} for c in checks if c["status"] == "skipped"],
        "targets": [t for r in results.values() for t in r.get("targets", [])],
        "headline": {k: v for r in results.values() for k, v in r.get("headline", {}).items()},
    }


def write_all(out: Path, work: Path, mode: str, setup: dict, results: dict, started: float, log) -> dict:
    """Write OUT_DIR's files, print the summary table, return the summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(mode, setup, results, started)
    files = ["summary.json", "results.json", "log.txt"]
    write_json(out / "results.json", results)
    if merge_junit(sorted(work.glob("junit-*.xml")), out / "junit.xml"):
        files.append("junit.xml")
    if zip_folder(work / "plots", "*.png", out / "plots.zip"):
        files.append("plots.zip")
    if zip_folder(work / "lessons", "*.ipynb", out / "lessons.zip"):
        files.append("lessons.zip")
    summary["files"] = sorted(files)
    print_table(summary, log)
    write_json(out / "summary.json", summary)
    (out / "log.txt").write_text("\n".join(log.lines) + "\n")
    return summary


def print_table(summary: dict, log) -> None:
    log("")
    log(f"gpu_check — {summary['banner']}")
    log(f"device: {summary['device']}; engine default {summary['engine_default']['engine_device']}"
        f"/{summary['engine_default']['engine_dtype']}; {summary['wall_s']:.0f} s in all")
    for c in summary["checks"]:
        log(f"  {c['status']:<8} {c['name']:<18} {c['reason'][:150]}")
    for t in summary["targets"]:
        value = "n/a" if t["value"] is None else f"{t['value']:.3g}"
        verdict = {True: "met", False: "NOT met", None: "not judged (no GPU)"}[t["met"]]
        log(f"  target   {t['name']}: {value} (target {t['target']}) — {verdict}")
    log(f"overall: {summary['status'].upper()}; files: {', '.join(summary['files'])}")
