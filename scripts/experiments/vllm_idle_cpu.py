"""docs/performance.md, "vLLM on this CPU": how long vLLM's processes stay busy after a run
(why the peers bench waits, `benchmarks/peers.py: wait_until_idle`).
    .venv/bin/python scripts/experiments/vllm_idle_cpu.py /tmp/vllm-venv/bin/python

Starts the bench's vLLM worker (`benchmarks/peers.py`), sends it a 2-token and a
40-token run of 16 prompts, and after each prints the CPU its whole process tree used
in every quarter second for 6 s (100 % = one core), with `VllmWorker.run`'s own idle
wait turned off (`wait_idle=False`)."""
import sys
import time
from pathlib import Path

from benchmarks.peers import VllmWorker, _model_dir, tree_cpu_seconds


def main(python: str) -> None:
    worker = VllmWorker(python, str(_model_dir("smollm2-135m")), 16, "float32", 2,
                        Path("/tmp/vllm_idle_cpu.log"))
    try:
        for new_tokens in (2, 40):
            worker.run([[1, 2, 3, 4] * 8] * 16, [new_tokens] * 16, wait_idle=False)
            start, used, samples = time.perf_counter(), tree_cpu_seconds(worker.proc.pid), []
            while time.perf_counter() - start < 6:
                time.sleep(0.25)
                now = tree_cpu_seconds(worker.proc.pid)
                samples.append(f"{time.perf_counter() - start:.2f}s {100 * (now - used) / 0.25:.0f}%")
                used = now
            print(f"after a {new_tokens}-token run:", ", ".join(samples), flush=True)
    finally:
        worker.close()


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/vllm-venv/bin/python")
