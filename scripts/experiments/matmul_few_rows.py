"""docs/performance.md, change 13: minillm's few-rows fp32 matmul
(`minillm_cpu/csrc/matmul.cpp`) against the library kernels, by row count. Run:
    .venv/bin/python scripts/experiments/matmul_few_rows.py [ROWS ...]
    .venv/bin/python scripts/experiments/matmul_few_rows.py --distances

All the matmuls of one SmolLM2-135M decode step (random weights of its shapes: the 120
layer matrices of `matmul_rows.py` and the 49152×576 vocabulary projection, 538 MB in
fp32), 2 threads, rounds alternating between the kernels, median of 7, ms and the
weight bytes read per second:

* `F.linear` (MKL), oneDNN's packed copy, MKL's copy packed for exactly that many rows
  (what `PackedWeight` keeps on Intel where the C++ kernels do not run), and
  `matmul_few_rows` on its panels (`CpuKernels.pack_panels`);
* `read only`: `torch.sum` over a tensor of the same 538 MB, the speed of streaming the
  bytes with nothing else to do;
* `in cache`: `matmul_few_rows` by one 576×576 weight (1.3 MB, in the two cores' L2)
  500 times, GFLOP/s: the speed of its arithmetic alone.

`--distances`: the kernel re-compiled with other distances and localities for its L2
prefetch (the constant and the hint substituted in a copy of csrc/matmul.cpp, compiled
with `minillm_cpu/build.py`'s flags into a temporary folder), 16 rows and 1 row.
"""
import ctypes
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from matmul_rows import layer_weights, median_step_ms, packed_call          # this folder
from minillm_cpu import kernels as cpu_kernels
from minillm_cpu.build import FLAGS, SOURCE_DIR, find_compiler

ROWS = (1, 2, 4, 8, 16)
VOCAB, HIDDEN = 49152, 576
ROUNDS = 7


def step_weights() -> list[torch.Tensor]:
    return layer_weights(torch.float32) + [torch.randn(VOCAB, HIDDEN) * 0.02]


def few_rows_call(weights, matmul=None):
    """call(x, j) = x @ weights[j]ᵀ through `matmul_few_rows` (or another build of it)."""
    kernels = cpu_kernels.load()
    panels = [kernels.pack_panels(w) for w in weights]
    if matmul is None:
        return lambda j, x: kernels.matmul_few_rows(x, panels[j], weights[j].shape[0])

    def call(j, x):
        y = torch.empty(x.shape[0], weights[j].shape[0])
        matmul(x.data_ptr(), panels[j].data_ptr(), None, y.data_ptr(), x.shape[0],
               weights[j].shape[0], x.shape[1], torch.get_num_threads())
        return y
    return call


def mkl_packed(weights, rows):
    packed = [torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for w in weights]
    return lambda j, x: torch.ops.mkl._mkl_linear(x, packed[j], weights[j], None, rows)


def median_ms(calls: dict, weights, rows: int) -> dict[str, float]:
    """`matmul_rows.median_step_ms` after one untimed pass of each call (page faults, the
    libraries' first-call set-up)."""
    x = {k: torch.randn(rows, k) for k in {w.shape[1] for w in weights}}
    for call in calls.values():
        for j, w in enumerate(weights):
            call(j, x[w.shape[1]])
    return median_step_ms(calls, weights, rows, ROUNDS)


def check(call, weights, rows):
    """call against F.linear on every weight shape of the step (one of each)."""
    first_of_shape = {w.shape: j for j, w in reversed(list(enumerate(weights)))}
    for j in first_of_shape.values():
        x = torch.randn(rows, weights[j].shape[1])
        torch.testing.assert_close(call(j, x), F.linear(x, weights[j]), rtol=1e-5, atol=1e-5)


def compare(row_counts):
    weights = step_weights()
    gb = sum(w.numel() * 4 for w in weights) / 1e9
    flat = torch.randn(sum(w.numel() for w in weights))
    onednn, ours = packed_call(weights), few_rows_call(weights)
    print(f"{gb * 1e3:.0f} MB of weights per step; ms (GB/s)")
    for rows in row_counts:
        check(ours, weights, rows)
        calls = {"F.linear": lambda j, x: F.linear(x, weights[j]), "oneDNN packed": onednn,
                 f"MKL packed for {rows}": mkl_packed(weights, rows), "matmul_few_rows": ours,
                 "read only": lambda j, x: flat.sum() if j == 0 else None}
        ms = median_ms(calls, weights, rows)
        print(f"{rows:2d} rows: " + ", ".join(f"{n} {t:.1f} ({gb / t * 1e3:.1f})"
                                              for n, t in ms.items())
              + f"; in cache {in_cache_gflops(ours, weights, rows):.0f} GFLOP/s", flush=True)


def in_cache_gflops(call, weights, rows, repeats=500):
    j = next(i for i, w in enumerate(weights) if w.shape == (576, 576))
    x = torch.randn(rows, 576)
    call(j, x)
    start = time.perf_counter()
    for _ in range(repeats):
        call(j, x)
    return 2 * rows * 576 * 576 * repeats / (time.perf_counter() - start) / 1e9


def compile_matmul(source: Path, library: Path, *defines: str):
    """`minillm_matmul_few_rows` from `source` (a variant of matmul.cpp), compiled with
    build.py's flags into `library`, as a ctypes function."""
    subprocess.run([find_compiler(), *FLAGS, *defines, str(source), "-o", str(library)],
                   check=True)
    matmul = ctypes.CDLL(str(library)).minillm_matmul_few_rows
    P, I64 = ctypes.c_void_p, ctypes.c_int64
    matmul.argtypes = [P, P, P, P, I64, I64, I64, ctypes.c_int]
    return matmul


def build_variant(folder: Path, distance: int, locality: int):
    source = (SOURCE_DIR / "matmul.cpp").read_text()
    old_distance = "constexpr int64_t kDistance = 2048;"
    old_hint = "/*read*/ 0, /*into L2*/ 2);"
    assert old_distance in source and old_hint in source, "matmul.cpp changed: update here"
    source = source.replace(old_distance, f"constexpr int64_t kDistance = {distance};")
    source = source.replace(old_hint, f"0, {locality});")
    path = folder / f"matmul-{distance}-{locality}.cpp"
    path.write_text(source)
    return compile_matmul(path, path.with_suffix(".so"))


def distances():
    weights = step_weights()
    with tempfile.TemporaryDirectory() as folder:
        calls = {}
        for distance in (0, 1024, 2048, 4096, 8192):          # floats ahead; 0: none
            for locality in ((0, 2, 3) if distance else (2,)):  # 0 NTA, 2 into L2, 3 into L1
                call = few_rows_call(weights, build_variant(Path(folder), distance, locality))
                check(call, weights, 16)
                calls[f"distance {distance} locality {locality}"] = call
        for rows in (16, 1):
            for name, t in median_ms(calls, weights, rows).items():
                print(f"{rows:2d} rows, {name}: {t:.1f} ms", flush=True)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    torch.manual_seed(0)
    torch.set_num_threads(2)
    if sys.argv[1:] == ["--distances"]:
        distances()
    else:
        compare(tuple(int(a) for a in sys.argv[1:]) or ROWS)
