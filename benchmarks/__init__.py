"""`python -m benchmarks` — the engine benchmark.

One run, one seeded workload per question, every contender measured in the same run
(alternating, medians), every number written to `bench-results/` (JSON + PNG):

    python -m benchmarks                 the engine on its own, full workloads, 3 rounds
    python -m benchmarks --quick         small workloads, one round: a first look
    python -m benchmarks --peers         minillm vs transformers (and vLLM, if given)
    python -m benchmarks --out DIR --rounds 5 --only throughput,step_time
    python -m benchmarks serve ...       load generator for a running server (serve/)

What it measures, one module per experiment (`registry.py` lists them):

* `throughput` — continuous vs static batching: useful generated tokens/s on a
  heavy-tailed burst, slot utilisation, KV waste (contiguous reservation vs paged);
* `kv_budget` — the most sequences a fixed KV budget holds at once, contiguous vs paged;
* `chunked` — P99 inter-token latency and P50 time to first token with and without
  chunked prefill, long prompts arriving (Poisson) while others decode;
* `step_time` — decode step time vs batch size, next to the roofline ceiling measured
  on this machine (memory bandwidth and matmul FLOP/s, `roofline.py`);
* `simulator` — how fast the simulator runs a thousand requests;
* `prefix_caching` — the prefix cache off and on, requests sharing a long system
  prompt: prompt tokens computed, hit rate, TTFT, tokens/s, same answers or not;
* `speculative` — prompt-lookup speculative decoding off and on, a copy task and a
  free-form task: acceptance rate, tokens per forward pass, speed-up, same answers;
* `peers` (with `--peers`) — tokens/s of minillm, transformers `generate`,
  transformers' continuous batching and vLLM on the same chat workload.

The rest of the package: `common.py` (the loaded model, running a workload on an
`LLM`, text and plot formatting), `ab.py` (alternating rounds, medians, paired
ratios), `workloads.py` (the prompt text), `answers.py` (same answers with and
without a technique), `run.py` (run, print, write).

**Adding an experiment** touches one new file and one line: write
`benchmarks/NAME.py` with its workload sizes, `planned_runs(config)`, `run(bench)`,
`text(result)` and `plot(result, path)` (see `registry.py` for the contract), then add
`"NAME": NAME` to `EXPERIMENTS` in `registry.py`. `--only NAME` then runs it.

Timings on a shared machine are noisy, which is why the bench reports *ratios* of
contenders measured in the same rounds, and prints the load average it ran under.
Speed targets live here, in the bench's output — never in timed tests.
"""
