"""docs/performance.md, "minillm vs other engines": the peers workload step by step, in
minillm and in vLLM, by step kind.
    .venv/bin/python scripts/experiments/vllm_step_kinds.py float32 /tmp/vllm-venv/bin/python

`peer_step_kinds.py` times minillm's forward passes by what a step carried; this times
whole engine steps (scheduling, forward, sampling, bookkeeping) of both engines on the
same workload, sorted the same way: 16 decodes, a new prompt beside decodes, 1-3
decodes, 4-15 decodes. minillm: `LLMEngine.step`. vLLM: its engine core's step, with
the engine core in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, so its steps can
be wrapped; the bench runs it in a second process, and on two cores that frontend
process costs vLLM time: its tokens/s here are higher than the bench's). Then
`torch.profiler` over one vLLM run of 16 prompts × 66 tokens: which kernels its steps
spend their time in. The part of this file after `--worker` runs in vLLM's
virtualenv and imports only the standard library and vllm."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# peer_step_kinds.KINDS again: this file also runs in vLLM's virtualenv, which has no minillm
KINDS = {"16 decodes": lambda rows, seqs: rows == seqs == 16,
         "with a prompt": lambda rows, seqs: rows > seqs,
         "1-3 decodes": lambda rows, seqs: rows == seqs <= 3,
         "4-15 decodes": lambda rows, seqs: rows == seqs and 4 <= seqs <= 15}


def report(engine: str, wall: float, tokens: int, steps: list[tuple[int, int, float]]) -> None:
    """steps: (rows scheduled, sequences, seconds) per engine step."""
    print(f"{engine}: {tokens / wall:.1f} tokens/s, wall {wall:.1f} s, {len(steps)} steps, "
          f"steps {sum(t for *_, t in steps):.1f} s", flush=True)
    for name, matches in KINDS.items():
        times = [t for rows, seqs, t in steps if matches(rows, seqs)]
        if times:
            print(f"   {name:14s} {len(times):4d} steps, {sum(times):5.1f} s, "
                  f"median {1e3 * statistics.median(times):6.1f} ms", flush=True)


def run_vllm(path: str, dtype: str) -> None:
    """In vLLM's virtualenv: the workload in `path`, twice, each engine step timed."""
    from vllm import LLM, SamplingParams
    work = json.load(open(path))
    llm = LLM(model=work["model"], dtype=dtype, max_num_seqs=16, max_model_len=2048, seed=0,
              enable_prefix_caching=False)
    core = llm.llm_engine.engine_core.engine_core         # EngineCore, in this process
    steps, last = [], {}
    schedule, step_fn = core.scheduler.schedule, core.step_fn

    def timed_schedule(*args, **kwargs):
        out = schedule(*args, **kwargs)
        last["tokens"] = dict(out.num_scheduled_tokens)
        return out

    def timed_step():
        start = time.perf_counter()
        result = step_fn()
        if last.get("tokens"):
            steps.append((sum(last["tokens"].values()), len(last["tokens"]), time.perf_counter() - start))
        last.clear()
        return result
    core.scheduler.schedule, core.step_fn = timed_schedule, timed_step
    prompts = [{"prompt_token_ids": p} for p in work["prompts"]]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in work["lens"]]
    llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    for _ in range(2):
        steps.clear()
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        report("vLLM", time.perf_counter() - start, sum(work["lens"]), steps)
    profile_vllm(llm, prompts[:16])


def profile_vllm(llm, prompts) -> None:
    """`torch.profiler` over 16 prompts × 66 tokens in vLLM (mostly 16-decode steps)."""
    from torch.profiler import ProfilerActivity, profile
    from vllm import SamplingParams
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        llm.generate(prompts, SamplingParams(max_tokens=66, ignore_eos=True), use_tqdm=False)
    print("vLLM, 16 prompts x 66 tokens (66 steps):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=16), flush=True)


def run_minillm(dtype: str, path: str) -> None:
    """The same workload in minillm (twice), and written to `path` for vLLM."""
    import torch

    from minillm import LLM, SamplingParams
    from benchmarks.peers import _model_dir, peer_output_lengths, peer_prompts
    torch.set_num_threads(2)
    llm = LLM(max_num_seqs=16, dtype=dtype)
    engine, runner = llm.llm_engine, llm.llm_engine.runner
    model, steps, last = runner.model, [], {}

    def shaped_forward(*args):          # args: input_ids [T], ..., logits_indices [S]
        last["shape"] = (args[0].shape[0], args[4].shape[0])
        return model(*args)
    step = engine.step

    def timed_step():
        start = time.perf_counter()
        out = step()
        if "shape" in last:
            steps.append((*last.pop("shape"), time.perf_counter() - start))
        return out
    runner.model, engine.step = shaped_forward, timed_step
    prompt_ids, lens = peer_prompts(llm.tokenizer), peer_output_lengths()
    json.dump({"model": str(_model_dir("smollm2-135m")), "prompts": prompt_ids, "lens": lens},
              open(path, "w"))
    prompts = [{"prompt_token_ids": p} for p in prompt_ids]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lens]
    llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    for _ in range(2):
        steps.clear()
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        report("minillm", time.perf_counter() - start, sum(lens), steps)


def main(dtype: str, vllm_python: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "workload.json")
        run_minillm(dtype, path)
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_OMP_THREADS_BIND="0-1",
                   VLLM_CPU_KVCACHE_SPACE="2", HF_HUB_OFFLINE="1")
        env.pop("PYTHONPATH", None)
        log = os.path.join(tempfile.gettempdir(), "vllm_step_kinds.log")
        with open(log, "w") as err:
            subprocess.run([vllm_python, __file__, "--worker", path, dtype], env=env, check=True,
                           stderr=err)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    if sys.argv[1] == "--worker":
        run_vllm(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2])
