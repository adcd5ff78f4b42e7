"""Issue 18: minillm continuous and vLLM alone together, alternating (no transformers).
    .venv/bin/python scripts/experiments/minillm_beside_vllm.py float32 4 /tmp/vllm-venv/bin/python

The bench's own pieces (`Bench`, the peers workload, `run_minillm`, `VllmWorker`,
`alternate`), with only these two contenders: useful tokens/s per round and the
per-round ratio."""
import sys
from functools import partial
from pathlib import Path

from benchmarks.ab import alternate
from benchmarks.common import Bench, BenchConfig, kv_blocks_for, warm_up
from benchmarks.peers import (FULL_PEERS, VllmWorker, _model_dir, peer_output_lengths,
                                 peer_prompts, run_minillm)
from minillm.sim.workload import RequestSpec


def main(dtype: str, rounds: int, python: str) -> None:
    bench = Bench(BenchConfig(dtype=dtype))
    prompts = peer_prompts(bench.tokenizer, FULL_PEERS, bench.vocab_size, 0)
    lens = peer_output_lengths(FULL_PEERS, 0)
    specs = [RequestSpec(f"chat-{i}", len(p), n, n) for i, (p, n) in enumerate(zip(prompts, lens))]
    llm = bench.mode_llms(("continuous",), kv_blocks_for(specs, 16))["continuous"]
    warm_up(llm, prompts[:16])
    worker = VllmWorker(python, str(_model_dir("smollm2-135m")), 16, dtype, 2,
                        Path("/tmp/minillm_beside_vllm.log"))
    try:
        worker.run(prompts[:16], [2] * 16)
        runners = {"minillm": partial(run_minillm, llm, specs, prompts),
                   "vLLM": partial(worker.run, prompts, lens)}
        results = alternate(runners, rounds)
    finally:
        worker.close()
    for name, runs in results.items():
        print(dtype, name, [round(r["tokens_per_s"], 1) for r in runs])
    print(dtype, "minillm / vLLM per round",
          [round(a["tokens_per_s"] / b["tokens_per_s"], 2)
           for a, b in zip(results["minillm"], results["vLLM"])])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
