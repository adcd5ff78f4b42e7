"""minillm beside other engines, on one workload: `python -m benchmarks --peers`.

The workload: chat prompts through the chat template, output lengths drawn from a
skewed (lognormal) law, EOS ignored so every engine produces exactly the same number
of tokens per request, `max_num_seqs` sequences at a time, the same dtype and thread
count. Contenders:

* **minillm** — static, continuous, continuous + chunked prefill, on the executor
  `LLM(executor="auto")` picks here, and continuous once more on the readable model
  ("eager"), when auto picked another: its ratio is the readable engine's own;
* **transformers `generate`** and **transformers continuous batching** (`hf_peers.py`);
* **vLLM** (CPU build) — only when a Python with vLLM is given (`--vllm-python`); it
  runs in its own process and virtualenv (`vllm_worker.py`; see
  docs/performance.md for the set-up).

Every contender is timed from the first request handed in to the last token out
(engine start-up excluded), and its output lengths are checked token for token.
Contenders alternate in rounds (see `ab.py`); the table shows medians and the median
of per-round ratios against minillm continuous.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import psutil

from benchmarks.ab import alternate, median, paired_ratios, summary
from benchmarks.common import (figure, kv_blocks_for, num, pct, ratio_line, run_workload, save,
                                  table, warm_up)
from benchmarks.hf_peers import hf_continuous, hf_generate_static, peer_result
from benchmarks.workloads import chat_prompt_ids, chat_questions
from minillm.sim.workload import RequestSpec, fixed, lognormal, make_workload
from minillm.widgets.style import COLORS

BASE = "minillm continuous"          # every ratio is this contender / another
TARGETS = {"minillm continuous / transformers generate": 4.0,
           "minillm continuous / transformers CB": 3.0, "minillm continuous / vLLM": 1.0}


@dataclass(frozen=True)
class PeerShape:
    num_requests: int = 64
    output_median: int = 40          # lognormal output lengths: median, sigma, cap
    output_sigma: float = 1.0
    output_cap: int = 256


FULL_PEERS = PeerShape()
QUICK_PEERS = PeerShape(num_requests=6, output_median=4, output_sigma=0.8, output_cap=12)


def peer_output_lengths(shape: PeerShape = FULL_PEERS, seed: int = 0) -> list[int]:
    """Skewed (lognormal) output lengths, one per chat prompt."""
    specs = make_workload(shape.num_requests, fixed(1),
                          lognormal(shape.output_median, shape.output_sigma, cap=shape.output_cap),
                          max_tokens="output_len", seed=seed)
    return [s.output_len for s in specs]


def peer_prompts(tokenizer, shape: PeerShape = FULL_PEERS, vocab_size: int | None = None,
                 seed: int = 0) -> list[list[int]]:
    """The chat prompts as token ids (chat template applied), or random ids without
    a tokenizer (the tiny test model): lengths 16–48."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        rng = np.random.default_rng(seed)
        return [rng.integers(2, vocab_size, size=int(rng.integers(16, 49))).tolist()
                for _ in range(shape.num_requests)]
    return [chat_prompt_ids(tokenizer, q) for q in chat_questions(shape.num_requests)]


def planned_runs(config) -> int:
    return config.rounds * (7 if config.vllm_python else 6)


def run_minillm(llm, specs: list[RequestSpec], prompts: list[list[int]]) -> dict:
    """One timed run of the workload on minillm. The time is its Trace's: from the
    requests' arrival to the end of the last step. `run_workload`'s garbage collection
    before that (docs/performance.md has its cost) is not engine work, and vLLM's timed
    run does none."""
    trace = run_workload(llm, specs, prompts)
    elapsed = trace.duration
    produced = [trace.requests[s.request_id].output_len for s in specs]
    return peer_result(elapsed, [s.output_len for s in specs], produced, sum(produced))


WORKER = Path(__file__).with_name("vllm_worker.py")
MARK = "@@bench@@ "


class VllmWorker:
    """vLLM in its own Python (its own virtualenv), driven over stdin/stdout."""

    def __init__(self, python: str, model_dir: str, max_num_seqs: int, dtype: str,
                 threads: int, log_path: Path):
        env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
                   VLLM_CPU_KVCACHE_SPACE="2", HF_HUB_OFFLINE="1")
        env.pop("PYTHONPATH", None)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [python, str(WORKER), "--model", model_dir, "--max-num-seqs", str(max_num_seqs),
             "--dtype", dtype], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
            self.log.write(line)
        raise RuntimeError(f"the vLLM worker exited (code {self.proc.wait()}); see {self.log.name}")

    def run(self, prompts: list[list[int]], lens: list[int], wait_idle: bool = True) -> dict:
        """One timed run in vLLM; then (unless `wait_idle` is False) wait for its
        processes to go quiet: after a run they keep one core busy for about a second
        (measured: docs/performance.md), and the next contender must not start on one core."""
        self.proc.stdin.write(json.dumps({"cmd": "run", "prompts": prompts, "max_tokens": lens}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if wait_idle:
            wait_until_idle(self.proc.pid)
        return peer_result(reply["elapsed_s"], lens, reply["output_lens"], sum(reply["output_lens"]))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        if self.proc.poll() is None:
            self.proc.kill()
        self.log.close()


def tree_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by process `pid` and all its descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def wait_until_idle(pid: int, timeout: float = 10.0, interval: float = 0.25,
                    busy_cores: float = 0.2) -> bool:
    """Wait until process `pid` and its children use less than `busy_cores` of a core
    over one `interval`; at most `timeout` seconds. True if they went quiet."""
    deadline = time.monotonic() + timeout
    used = tree_cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = tree_cpu_seconds(pid)
        if now - used < busy_cores * interval:
            return True
        used = now
    return False


def vllm_status(python: str | None) -> str | None:
    """None if `python` can import vLLM, else the reason it will be skipped."""
    if not python:
        return ("skipped: no --vllm-python given (vLLM lives in its own virtualenv; "
                "see docs/performance.md)")
    try:
        done = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"],
                              capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"skipped: {python} could not run ({err})"
    if done.returncode != 0:
        return f"skipped: {python} cannot import vllm ({done.stderr.strip().splitlines()[-1:]})"
    return None


def contenders(bench, specs, prompts, lens) -> tuple[dict, dict, list, str]:
    """({name: runner} warmed up, {name: why skipped}, the vLLM workers to close, the
    executor minillm's contenders run on)."""
    cfg = bench.config
    n = cfg.max_num_seqs
    warm = [2] * min(n, len(prompts))                     # output lengths of the warm-up runs
    runners, skipped, workers = {}, {}, []
    blocks = kv_blocks_for(specs, n)
    for mode, llm in bench.mode_llms(("static", "continuous", "chunked"), blocks).items():
        warm_up(llm, prompts[:n])
        runners[f"minillm {mode}"] = partial(run_minillm, llm, specs, prompts)
    if llm.llm_engine.config["executor"] != "eager":          # the readable model beside it
        eager = bench.make_llm(num_kv_blocks=blocks, executor="eager",
                               **bench.mode_kwargs("continuous"))
        warm_up(eager, prompts[:n])
        runners[f"{BASE} (eager)"] = partial(run_minillm, eager, specs, prompts)
    else:
        skipped[f"{BASE} (eager)"] = "skipped: the executor above already is the readable one"
    hf = bench.hf_model.to(bench.dtype)
    pad = bench.tokenizer.pad_token_id if bench.tokenizer is not None else 0
    pad = 0 if pad is None else pad
    hf_generate_static(hf, prompts[:n], warm, n, pad)
    runners["transformers generate"] = partial(hf_generate_static, hf, prompts, lens, n, pad)
    runners["transformers CB"] = partial(hf_continuous, hf, prompts, lens, n)
    reason = vllm_status(cfg.vllm_python)
    if reason is None:
        worker = VllmWorker(cfg.vllm_python, str(_model_dir(cfg.model)), n, cfg.dtype,
                            cfg.threads, Path(cfg.out) / "vllm-worker.log")
        workers.append(worker)
        worker.run(prompts[:n], warm)
        runners["vLLM"] = partial(worker.run, prompts, lens)
    else:
        skipped["vLLM"] = reason
    return runners, skipped, workers, llm.llm_engine.config["executor"]


def run(bench) -> dict:
    """Every contender on the same chat workload, alternating rounds."""
    cfg = bench.config
    shape = QUICK_PEERS if cfg.quick else FULL_PEERS
    prompts = peer_prompts(bench.tokenizer, shape, bench.vocab_size, cfg.seed)
    lens = peer_output_lengths(shape, cfg.seed)
    specs = [RequestSpec(f"chat-{i}", len(p), n, n) for i, (p, n) in enumerate(zip(prompts, lens))]
    runners, skipped, workers, executor = contenders(bench, specs, prompts, lens)
    try:
        results = alternate(runners, cfg.rounds, on_run=bench.tick)
    finally:
        for worker in workers:
            worker.close()
    gc.collect()
    ratios = {f"{BASE} / {other}": summary(paired_ratios(results, BASE, other, "tokens_per_s"))
              for other in results if other != BASE}
    return {"workload": {"num_requests": len(prompts), "output_tokens": sum(lens),
                         "prompt_tokens": sum(len(p) for p in prompts), "output_max": max(lens),
                         "output_median": median(lens), "shape": vars(shape),
                         "max_num_seqs": cfg.max_num_seqs, "threads": cfg.threads,
                         "dtype": cfg.dtype, "executor": executor},
            "runs": results, "medians": {k: median([r["tokens_per_s"] for r in v])
                                         for k, v in results.items()},
            "ratios": ratios, "skipped": skipped,
            "vllm": workers[0].info if workers else None}


def _model_dir(model) -> Path:
    """The Hugging Face folder vLLM should load (the converted cache for a known name)."""
    from minillm.model.weights_cache import model_cache_dir
    from minillm.model.loader import KNOWN_MODELS
    name = str(model)
    return model_cache_dir() / name if name in KNOWN_MODELS else Path(name)


def text(r: dict) -> str:
    w = r["workload"]
    head = (f"Peers — {w['num_requests']} chat prompts, {w['output_tokens']:,} output tokens "
            f"(median {w['output_median']:.0f}, max {w['output_max']}), EOS ignored, "
            f"{w['max_num_seqs']} concurrent, {w['dtype']}, {w['threads']} threads; minillm's "
            f"executor {w.get('executor', '?')!r}")
    rows = [[name, num(r["medians"][name]), f"{median([x['elapsed_s'] for x in runs]):.1f} s",
             pct(1 - runs[0]["useful_tokens"] / runs[0]["computed_tokens"])]
            for name, runs in r["runs"].items()]
    lines = [head, table(["engine", "useful tokens/s", "wall time", "wasted compute"], rows)]
    lines += [ratio_line(name, s, TARGETS.get(name)) for name, s in r["ratios"].items()]
    lines += [f"{k}: {v}" for k, v in r["skipped"].items()]
    return "\n".join(lines)


def plot(r: dict, path) -> None:
    """Useful tokens/s per contender, horizontal bars (median) and dots (rounds)."""
    fig, ax = figure(1, width=7.5)
    names = list(r["runs"])
    palette = {"minillm static": COLORS["static"], "minillm continuous": COLORS["continuous"],
               "minillm chunked": COLORS["chunked"]}
    colors = [palette.get(n, COLORS["waiting"] if "transformers" in n else COLORS["preempt"])
              for n in names]
    for i, name in enumerate(names):
        values = [run["tokens_per_s"] for run in r["runs"][name]]
        ax.barh(i, median(values), color=colors[i], alpha=0.85)
        ax.scatter(values, [i] * len(values), color=COLORS["text"], s=12, zorder=3)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("useful generated tokens / s (bars: median, dots: rounds)")
    ax.set_title(f"{r['workload']['num_requests']} chat prompts, {r['workload']['max_num_seqs']} "
                 f"concurrent, {r['workload']['dtype']}, {r['workload']['threads']} threads")
    save(fig, path)


if __name__ == "__main__":          # pragma: no cover
    sys.exit("run `python -m benchmarks --peers`")
