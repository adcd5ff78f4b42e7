"""Issue 18: does streaming two panels per thread make the 16-row matmul faster? Run:
    .venv/bin/python scripts/experiments/matmul_two_streams.py

Compiles `matmul_two_streams.cpp` (this folder) with build.py's flags for k-blocks of 32,
64 and 128, and times all the matmuls of one SmolLM2-135M decode step at 16 rows (the
shapes and the timer of `matmul_few_rows.py`: random weights, 2 threads, alternating
rounds) through it and through the kept `matmul_few_rows`; checks each against F.linear.
"""
import tempfile
from pathlib import Path

import torch

from matmul_few_rows import check, compile_matmul, few_rows_call, median_ms, step_weights

ROWS = 16


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    weights = step_weights()
    source = Path(__file__).with_name("matmul_two_streams.cpp")
    with tempfile.TemporaryDirectory() as folder:
        calls = {"matmul_few_rows (kept)": few_rows_call(weights)}
        for k_block in (32, 64, 128):
            matmul = compile_matmul(source, Path(folder) / f"two_streams_{k_block}.so",
                                    f"-DKB={k_block}")
            calls[f"two streams, k-block {k_block}"] = few_rows_call(weights, matmul)
        for call in calls.values():
            check(call, weights, ROWS)
        for name, ms in median_ms(calls, weights, ROWS).items():
            print(f"{name:26s} {ms:6.1f} ms", flush=True)


if __name__ == "__main__":
    main()
