"""`python -m minillm.bench` — the engine benchmark.

One run, one seeded workload per question, every contender measured in the same run
(alternating, medians), every number written to `bench-results/` (JSON + PNG):

    python -m minillm.bench                 the engine on its own (about 10 minutes)
    python -m minillm.bench --quick         small workloads, one round (about a minute)
    python -m minillm.bench --peers         minillm vs transformers (and vLLM, if given)
    python -m minillm.bench --out DIR --rounds 5 --only throughput,step_time

What it measures (see `experiments.py` and `peers.py` for the details):

* continuous vs static batching: useful generated tokens/s on a heavy-tailed burst,
  slot utilisation, KV waste (contiguous reservation vs paged blocks);
* the most sequences a fixed KV budget holds at once, contiguous vs paged;
* P99 inter-token latency and P50 time to first token with and without chunked
  prefill, long prompts arriving (Poisson) while others decode;
* decode step time vs batch size, next to the roofline ceiling measured on this
  machine (memory bandwidth and matmul FLOP/s);
* how fast the simulator runs 1000 requests;
* prefix caching on and off, on requests sharing a long system prompt: prompt tokens
  computed, hit rate, TTFT, tokens/s, and whether the answers stay the same;
* prompt-lookup speculative decoding on a copy task and a free-form task: acceptance
  rate, tokens per forward pass, speed-up, and whether the answers stay the same;
* with `--peers`: tokens/s of minillm, transformers `generate`, transformers'
  continuous batching and vLLM on the same chat workload.

Timings on a shared machine are noisy, which is why the bench reports *ratios* of
contenders measured in the same rounds, and prints the load average it ran under.
Speed targets live here, in the bench's output — never in timed tests.
"""

from minillm.bench.experiments import EXPERIMENTS, Bench, BenchConfig  # noqa: F401
from minillm.bench.run import run_bench  # noqa: F401
