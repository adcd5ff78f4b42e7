r"""`python -m benchmarks serve`: a load generator for any OpenAI-compatible server.

    # drive a running server (minillm, vLLM, ...) at several Poisson rates, streaming
    python -m benchmarks serve --base-url http://127.0.0.1:8000 --model smollm2-135m \
        --num-prompts 64 --request-rate 0.5,1,2,inf --goodput ttft:2000 tpot:200

    # minillm's own acceptance run: saturated server tokens/s vs offline LLM.generate,
    # client TTFT vs in-engine TTFT at low load (and vLLM, if --vllm-python is given)
    python -m benchmarks serve --compare-offline --vllm-python /tmp/vllm-venv/bin/python

Results use `vllm bench serve`'s names (results.py), go to `--out` as JSON (and a PNG
when several rates ran), and are printed. The workload is seeded (workload.py): the same
flags send the same requests, with `ignore_eos` so every server generates the same
number of tokens.

    client.py    one streamed request, timed chunk by chunk
    load.py      open-loop arrivals (burst or Poisson), bounded concurrency and time
    results.py   TTFT / TPOT / ITL / E2EL percentiles, throughput, goodput
    workload.py  seeded lengths, token-id prompts, request bodies
    sweep.py     one workload at several rates
    compare.py   the server vs offline (and vs vLLM) comparison
    plots.py     latency vs request rate
"""

from benchmarks.serve.cli import main

__all__ = ["main"]
