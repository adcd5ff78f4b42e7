"""minillm beside other engines, on one workload: `python -m minillm.bench --peers`.

The workload (`workloads.peer_workload`): 64 chat prompts through the chat template,
output lengths drawn from a skewed (lognormal) law, EOS ignored so every engine
produces exactly the same number of tokens per request, 16 sequences at a time, fp32,
the same thread count. Contenders:

* **minillm** — static, continuous, continuous + chunked prefill;
* **transformers `generate`** — the usual way to batch with Hugging Face: padded
  batches of 16 prompts in arrival order, greedy, each batch running until its longest
  request is done (`max_new_tokens` = the batch's longest). Rows that finished early
  keep computing: only each request's own length counts as *useful* tokens;
* **transformers continuous batching** — its own paged-attention scheduler
  (`ContinuousBatchingManager`), 16 requests per batch, a per-request `max_new_tokens`;
* **vLLM** (CPU build) — only when a Python with vLLM is given (`--vllm-python`); it
  runs in its own process and virtualenv (see minillm/PERFORMANCE.md for the set-up).

Every contender is timed from the first request handed in to the last token out
(engine start-up excluded), and its output lengths are checked token for token.
Contenders alternate in rounds (see `ab.py`); the table shows medians and the median
of per-round ratios.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch

from minillm.bench import workloads as wl
from minillm.bench.ab import alternate, median, paired_ratios, summary
from minillm.bench.engine_runs import kv_blocks_for, run_specs, warm_up
from minillm.workload import RequestSpec


def _result(elapsed: float, lens: list[int], produced: list[int], computed: int) -> dict:
    """Common result dict; raises if any request got a different number of tokens."""
    wrong = [(i, got, want) for i, (got, want) in enumerate(zip(produced, lens)) if got != want]
    if wrong or len(produced) != len(lens):
        raise RuntimeError(f"wrong output lengths (index, got, wanted): {wrong[:5]}")
    useful = sum(lens)
    return {"elapsed_s": elapsed, "useful_tokens": useful, "computed_tokens": computed,
            "tokens_per_s": useful / elapsed}


# ------------------------------------------------------------------ minillm

def run_minillm(llm, specs: list[RequestSpec], prompts: list[list[int]]) -> dict:
    start = time.perf_counter()
    trace = run_specs(llm, specs, prompts)
    elapsed = time.perf_counter() - start
    produced = [trace.requests[s.request_id].output_len for s in specs]
    return _result(elapsed, [s.output_len for s in specs], produced, sum(produced))


# ------------------------------------------------------------------ transformers generate

@contextlib.contextmanager
def eos_disabled(model):
    """Let `generate` run to max_new_tokens: no EOS stopping, and no EOS masking either
    (min_new_tokens would change which tokens are chosen; this changes nothing but the
    stop rule — the same as minillm's and vLLM's ignore_eos)."""
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = None
    try:
        yield
    finally:
        model.generation_config.eos_token_id = saved


@torch.inference_mode()
def hf_generate_static(model, prompts: list[list[int]], lens: list[int], batch_size: int,
                       pad_id: int) -> dict:
    """Padded static batches with `model.generate` (greedy, left padding)."""
    produced, computed = [], 0
    start = time.perf_counter()
    with eos_disabled(model):
        for i in range(0, len(prompts), batch_size):
            batch, want = prompts[i:i + batch_size], lens[i:i + batch_size]
            width = max(len(p) for p in batch)
            ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch])   # [b, width]
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=max(want), pad_token_id=pad_id)
            new = out.shape[1] - width               # every row ran to the batch's longest
            produced += [min(new, n) for n in want]  # the useful part of each row
            computed += new * len(batch)
            if new != max(want):
                raise RuntimeError(f"generate made {new} tokens, expected {max(want)}")
    return _result(time.perf_counter() - start, lens, produced, computed)


# ------------------------------------------------------------------ transformers CB

HF_PAGE = 32            # tokens per page of transformers' paged cache

@torch.inference_mode()
def hf_continuous(model, prompts: list[list[int]], lens: list[int], max_concurrent: int) -> dict:
    """transformers' ContinuousBatchingManager with a per-request max_new_tokens."""
    from transformers import ContinuousBatchingConfig, GenerationConfig
    gen = GenerationConfig(do_sample=False, max_new_tokens=max(lens), eos_token_id=-1,
                           pad_token_id=0)
    # Size the paged cache for the workload: left alone it takes 90% of the free RAM.
    longest = max(len(p) + n for p, n in zip(prompts, lens))
    cb = ContinuousBatchingConfig(max_requests_per_batch=max_concurrent, page_size=HF_PAGE,
                                  num_blocks=max_concurrent * -(-longest // HF_PAGE) + 2,
                                  max_batch_tokens=2048, allow_block_sharing=False)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    try:
        start = time.perf_counter()
        for i, (p, n) in enumerate(zip(prompts, lens)):
            manager.add_request(p, request_id=f"r{i}", max_new_tokens=n, eos_token_id=-1)
        done = {}
        while len(done) < len(prompts):
            result = manager.get_result(timeout=1)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError("transformers' batching thread stopped early")
                continue
            if result.is_finished():
                if result.error:
                    raise RuntimeError(f"transformers CB failed: {result.error}")
                done[result.request_id] = len(result.generated_tokens)
        elapsed = time.perf_counter() - start
    finally:
        manager.stop(block=True)
        manager.destroy()
    produced = [done[f"r{i}"] for i in range(len(prompts))]
    return _result(elapsed, lens, produced, sum(produced))


# ------------------------------------------------------------------ vLLM (other process)

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

    def run(self, prompts: list[list[int]], lens: list[int]) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": "run", "prompts": prompts, "max_tokens": lens}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        return _result(reply["elapsed_s"], lens, reply["output_lens"], sum(reply["output_lens"]))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        if self.proc.poll() is None:
            self.proc.kill()
        self.log.close()


def vllm_status(python: str | None) -> str | None:
    """None if `python` can import vLLM, else the reason it will be skipped."""
    if not python:
        return ("skipped: no --vllm-python given (vLLM lives in its own virtualenv; "
                "see minillm/PERFORMANCE.md)")
    try:
        done = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"],
                              capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"skipped: {python} could not run ({err})"
    if done.returncode != 0:
        return f"skipped: {python} cannot import vllm ({done.stderr.strip().splitlines()[-1:]})"
    return None


# ------------------------------------------------------------------ the comparison

def peers(bench) -> dict:
    cfg = bench.config
    shape = wl.QUICK_PEERS if cfg.quick else wl.FULL_PEERS
    prompts = wl.peer_prompts(bench.tokenizer, shape, bench.vocab_size, cfg.seed)
    lens = wl.peer_output_lengths(shape, cfg.seed)
    specs = [RequestSpec(f"chat-{i}", len(p), n, n) for i, (p, n) in enumerate(zip(prompts, lens))]
    blocks = kv_blocks_for(specs, cfg.max_num_seqs)
    n = cfg.max_num_seqs
    runners, skipped, workers = {}, {}, []
    for mode, llm in bench.mode_llms(("static", "continuous", "chunked"), blocks).items():
        warm_up(llm, prompts[:n])
        runners[f"minillm {mode}"] = partial(run_minillm, llm, specs, prompts)
    hf = bench.hf_model.to(bench.dtype)
    pad = bench.tokenizer.pad_token_id if bench.tokenizer is not None else 0
    pad = 0 if pad is None else pad
    hf_generate_static(hf, prompts[:n], [2] * min(n, len(prompts)), n, pad)          # warm-up
    runners["transformers generate"] = partial(hf_generate_static, hf, prompts, lens, n, pad)
    runners["transformers CB"] = partial(hf_continuous, hf, prompts, lens, n)
    reason = vllm_status(cfg.vllm_python)
    if reason is None:
        worker = VllmWorker(cfg.vllm_python, str(_model_dir(cfg.model)), n, cfg.dtype,
                            cfg.threads, Path(cfg.out) / "vllm-worker.log")
        workers.append(worker)
        worker.run(prompts[:n], [2] * min(n, len(prompts)))                           # warm-up
        runners["vLLM"] = partial(worker.run, prompts, lens)
    else:
        skipped["vLLM"] = reason
    try:
        results = alternate(runners, cfg.rounds, on_run=bench.tick)
    finally:
        for worker in workers:
            worker.close()
    gc.collect()
    base = "minillm continuous"
    ratios = {f"{base} / {other}": summary(paired_ratios(results, base, other, "tokens_per_s"))
              for other in results if other != base}
    return {"workload": {"num_requests": len(prompts), "output_tokens": sum(lens),
                         "prompt_tokens": sum(len(p) for p in prompts), "output_max": max(lens),
                         "output_median": median(lens), "shape": vars(shape),
                         "max_num_seqs": n, "threads": cfg.threads, "dtype": cfg.dtype},
            "runs": results, "medians": {k: median([r["tokens_per_s"] for r in v])
                                         for k, v in results.items()},
            "ratios": ratios, "skipped": skipped,
            "vllm": workers[0].info if workers else None}


def _model_dir(model) -> Path:
    """The Hugging Face folder vLLM should load (the converted cache for a known name)."""
    from minillm.model_cache import model_cache_dir
    from minillm.model_loader import KNOWN_MODELS
    name = str(model)
    return model_cache_dir() / name if name in KNOWN_MODELS else Path(name)


def planned_runs(config) -> int:
    return config.rounds * (6 if config.vllm_python else 5)


if __name__ == "__main__":          # pragma: no cover
    sys.exit("run `python -m minillm.bench --peers`")
