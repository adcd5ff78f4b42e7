"""The driver: set up, pick the mode, run each part under its guard, write OUT_DIR.

    python -m gpu_check OUT_DIR [--only a,b] [--skip a,b] [--cpu] [--carry DIR] [--budget S]

(`scripts/gpu_check.sh` chooses the Python and puts the repository on PYTHONPATH.)
This process uses only the standard library and never imports torch: every part runs
in a child process, so a part that hangs or crashes (a GPU fault, a stuck kernel) is
killed with its whole process group and the next part still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gpu_check import bundle, carry, plan

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SITE = Path(tempfile.gettempdir()) / "gpu-check-site"


class Log:
    """Print and remember every line (the remembered copy becomes log.txt)."""

    def __init__(self):
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, line: str = "") -> None:
        with self.lock:
            print(line, flush=True)
            self.lines.append(line)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="bash scripts/gpu_check.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for summary.json, results.json, ...")
    parser.add_argument("--only", help=f"comma-separated parts among {', '.join(plan.BY_NAME)}")
    parser.add_argument("--skip", help="comma-separated parts to leave out")
    parser.add_argument("--cpu", action="store_true", help="the CPU mode even where a GPU is")
    parser.add_argument("--carry", type=Path, help="folder of carried wheels/ and model/ parts "
                                                   "(an offline machine; scripts/gpu_carry.sh)")
    parser.add_argument("--site", type=Path, default=DEFAULT_SITE,
                        help="where carried wheels are installed (put on PYTHONPATH)")
    parser.add_argument("--budget", type=float, help="seconds for all parts together "
                                                     f"(default {plan.BUDGET_S})")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternating rounds of the throughput and chunked comparisons "
                             "(default 1, to fit the budget; the bench's own default is 3)")
    args = parser.parse_args(argv)
    try:
        args.chosen, args.left_out = plan.choose(args.only, args.skip)
    except ValueError as err:
        parser.error(str(err))
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    os.environ["GPU_CHECK_ROUNDS"] = str(args.rounds)       # read by the measuring parts
    return args


def set_up(args, log: Log) -> dict:
    """Carried wheels and model (offline machines), then the model conversion."""
    start = time.perf_counter()
    info: dict = {"python": sys.executable}
    if args.carry:
        args.site.mkdir(parents=True, exist_ok=True)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join(paths + [str(args.site)])
        info.update(carry.install_wheels(args.carry, args.site, sys.executable))
        info.update(carry.stage_model(args.carry, args.site))
        log(f"set-up: {info.get('wheels', 0)} carried wheels ({info.get('note')}); "
            f"model: {info.get('model')}")
        if info.get("model") in ("assembled", "ready"):
            done = subprocess.run([sys.executable, "-m", "minillm", "prepare"], cwd=REPO,
                                  capture_output=True, text=True, timeout=300)
            info["prepare"] = (done.stdout + done.stderr).strip().splitlines()[-1:]
            log(f"set-up: python -m minillm prepare: {info['prepare']}")
    info["wall_s"] = round(time.perf_counter() - start, 1)
    return info


def probe_mode(args) -> str:
    """'gpu' when torch (in a child process) sees a CUDA GPU and --cpu was not given."""
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""      # the children see no GPU at all
        return "cpu"
    code = "import torch; print(int(torch.cuda.is_available()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"gpu_check: torch does not import in {sys.executable}:\n{done.stderr[-2000:]}")
    return "gpu" if done.stdout.strip().endswith("1") else "cpu"


def banner(mode: str, log: Log) -> None:
    rule = "=" * 78
    if mode == "gpu":
        text = ("GPU MODE: torch sees a CUDA GPU. Kernels compiled for it, the engine on CUDA\n"
                "with the Triton backend, lessons 06 and 07, and the GPU numbers.")
        # The interpreter would run the kernels in Python on the CPU: never in GPU mode.
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        # Toy sizes run fastest on one thread, and a busy 2-core machine is not
        # oversubscribed (two spinning OpenMP threads per process made a step 30x slower).
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        text = ("CPU MODE: no CUDA GPU here. Checks what a CPU can (imports, a kernel-test smoke\n"
                "subset in Triton's interpreter, the measurements at toy sizes) and lists the\n"
                "rest as skipped. Its timings are NOT GPU numbers.")
    log(rule)
    for line in text.splitlines():
        log(f"  {line}")
    log(rule)


def run_part(part: plan.Part, mode: str, work: Path, seconds: float, log: Log) -> dict:
    """Run one part in a child process group, killed after `seconds`; its result dict."""
    result_path = work / f"{part.name}.json"
    cmd = [sys.executable, "-m", "gpu_check.run_part", part.name, mode, str(work)]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, bufsize=1, start_new_session=True)
    tail: list[str] = []
    reader = threading.Thread(target=_copy_lines, args=(child.stdout, part.name, log, tail))
    reader.start()
    try:
        child.wait(timeout=seconds)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)            # the part and everything it started
        child.wait()
        timed_out = True
    reader.join(timeout=10)
    wall = round(time.perf_counter() - start, 1)
    if timed_out:
        return _failed(part, f"took longer than its guard of {seconds:.0f} s and was stopped", wall, tail)
    if not result_path.is_file():
        return _failed(part, f"the child exited with code {child.returncode} and wrote no result", wall, tail)
    result = json.loads(result_path.read_text())
    result["wall_s"] = wall
    return result


def _copy_lines(stream, name: str, log: Log, tail: list[str]) -> None:
    for line in stream:
        line = line.rstrip("\n")
        log(f"[{name}] {line}")
        tail.append(line)
        del tail[:-40]


def _failed(part: plan.Part, reason: str, wall: float, tail: list[str]) -> dict:
    return {"checks": [{"name": part.name, "status": "failed", "reason": reason}],
            "log_tail": tail[-40:], "wall_s": wall}


def skipped(name: str, reason: str) -> dict:
    return {"checks": [{"name": name, "status": "skipped", "reason": reason}], "wall_s": 0.0}


def run_all(args, mode: str, work: Path, log: Log) -> dict:
    budget = args.budget or plan.BUDGET_S[mode]
    deadline = time.perf_counter() + budget
    results: dict[str, dict] = {}
    for part in plan.PARTS:
        left = deadline - time.perf_counter()
        if part.name not in args.chosen:
            results[part.name] = skipped(part.name, args.left_out[part.name])
        elif part.needs_model and mode == "gpu" and not results["environment"].get("model_available"):
            results[part.name] = skipped(part.name, "SmolLM2-135M is not available here: "
                                         + results["environment"].get("model_note", "see environment"))
        elif left < 15:
            results[part.name] = skipped(part.name, f"no time left in the {budget:.0f} s budget")
        else:
            guard = min(part.guard_s(mode), left)
            log(f"\n--- {part.name}: {part.what} (guard {guard:.0f} s)")
            results[part.name] = run_part(part, mode, work, guard, log)
        log(f"--- {part.name}: {bundle.part_status(results[part.name])} "
            f"({results[part.name]['wall_s']:.0f} s)")
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    log = Log()
    started = time.time()
    setup = set_up(args, log)
    mode = probe_mode(args)
    banner(mode, log)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        results = run_all(args, mode, work, log)
        summary = bundle.write_all(args.out, work, mode, setup, results, started, log)
    return 0 if summary["status"] != "failed" else 1


if __name__ == "__main__":
    sys.exit(main())
