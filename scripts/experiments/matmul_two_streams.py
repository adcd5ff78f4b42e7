"""Issue 18: does streaming two panels per thread make the 16-row matmul faster? Run:
    .venv/bin/python scripts/experiments/matmul_two_streams.py

Compiles `matmul_two_streams.cpp` (this folder) with build.py's flags for k-blocks of 32,
64 and 128, and times all the matmuls of one SmolLM2-135M decode step at 16 rows (the
shapes of `matmul_few_rows.py`, random weights, 2 threads) through it and through the
kept `matmul_few_rows`, alternating rounds, median of 9; checks each against F.linear.
"""
import ctypes
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from matmul_few_rows import step_weights                                    # this folder
from minillm import cpu_kernels
from minillm.cpu_kernels.build import FLAGS, find_compiler

ROWS, ROUNDS = 16, 9


def build(folder: Path, k_block: int):
    library = folder / f"two_streams_{k_block}.so"
    source = Path(__file__).with_name("matmul_two_streams.cpp")
    subprocess.run([find_compiler(), *FLAGS, f"-DKB={k_block}", str(source), "-o", str(library)],
                   check=True)
    fn = ctypes.CDLL(str(library)).minillm_matmul_few_rows
    P, I64 = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [P, P, P, P, I64, I64, I64, ctypes.c_int]
    return fn


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    kernels = cpu_kernels.load()
    weights = step_weights()
    panels = [kernels.pack_panels(w) for w in weights]
    inputs = {k: torch.randn(ROWS, k) for k in {w.shape[1] for w in weights}}
    outputs = [torch.empty(ROWS, w.shape[0]) for w in weights]

    def through(fn):
        def step():
            for w, p, y in zip(weights, panels, outputs):
                fn(inputs[w.shape[1]].data_ptr(), p.data_ptr(), None, y.data_ptr(), ROWS,
                   w.shape[0], w.shape[1], torch.get_num_threads())
        return step
    with tempfile.TemporaryDirectory() as folder:
        steps = {"matmul_few_rows (kept)": through(kernels._matmul)}
        for k_block in (32, 64, 128):
            steps[f"two streams, k-block {k_block}"] = through(build(Path(folder), k_block))
        for name, step in steps.items():
            step()
            for w, y in zip(weights, outputs):
                torch.testing.assert_close(y, F.linear(inputs[w.shape[1]], w), rtol=1e-4, atol=1e-4)
        times = {name: [] for name in steps}
        for r in range(ROUNDS):
            for name in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
                start = time.perf_counter()
                steps[name]()
                times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        print(f"{name:26s} {sorted(t)[ROUNDS // 2] * 1e3:6.1f} ms", flush=True)


if __name__ == "__main__":
    main()
