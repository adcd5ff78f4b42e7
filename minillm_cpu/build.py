"""Compile the C++ kernels once per machine, and find them again next time.

    build_library() -> (path of the shared library, seconds spent compiling: 0.0 if cached)

The command is an ordinary compiler call, printed by `compile_command()`:

    g++ -O3 -march=native -fopenmp -fPIC -shared -std=c++17 -fno-math-errno \\
        -fno-trapping-math paged_attention.cpp elementwise.cpp matmul.cpp decoder_layer.cpp \\
        -o minillm_cpu_kernels-<key>.so

* `-march=native`: use every vector instruction this CPU has (AVX-512 or AVX2 on x86, NEON on ARM).
  So a library is only valid on the CPU it was built for: the cache key includes the
  CPU's model and feature flags, beside the sources, the flags and the compiler version.
* `-fopenmp`: the kernels split work between threads with OpenMP. The library asks for
  `libgomp.so.1`, the name of the OpenMP runtime PyTorch's Linux wheels ship and load
  first, so the dynamic loader hands it PyTorch's own copy: one pool of threads for the
  matmuls and the kernels, not two fighting over the cores.
* `-fno-math-errno -fno-trapping-math`: the kernels never read `errno` or the floating
  point exception flags, and saying so is what lets GCC turn `floorf` (inside
  `exp_approx`, common.h) into a vector instruction; without the second flag the SiLU
  loop stays scalar, several times slower than PyTorch's (docs/performance.md, change 12b).
  Neither flag changes what an operation computes; the loops it lets GCC vectorize may
  add in a new order where the source allows it (`omp simd reduction`), so results move
  in the last bits.
* No `-ffast-math`: it would let the compiler reorder float arithmetic freely, and with
  GCC < 13 a shared library built with it switches the whole process to flush tiny
  numbers to zero.

The library lands in `<model cache>/cpu_kernels/` (`~/.cache/minillm` unless
`$MINILLM_CACHE_DIR`), written under a temporary name and renamed, so two processes
building at once never load a half-written file (docs/performance.md: how long it takes).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from minillm.model.weights_cache import model_cache_dir

SOURCE_DIR = Path(__file__).parent / "csrc"
SOURCES = ("paged_attention.cpp", "elementwise.cpp", "matmul.cpp", "decoder_layer.cpp")
HEADERS = ("common.h",)
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c++17",
         "-fno-math-errno", "-fno-trapping-math", "-Wall")
COMPILE_TIMEOUT_S = 300


class BuildError(RuntimeError):
    """The kernels could not be compiled here (no compiler, or it failed)."""


def find_compiler() -> str:
    """`$CXX`, else g++, else c++; a BuildError saying what to install if none is found."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        raise BuildError("no C++ compiler found (looked for $CXX, g++, c++): install one, "
                         "e.g. `sudo apt-get install g++`, or use executor='eager'")
    return compiler


def compile_command(compiler: str, output: Path) -> list[str]:
    return [compiler, *FLAGS, *(str(SOURCE_DIR / s) for s in SOURCES), "-o", str(output)]


def build_library() -> tuple[Path, float]:
    """The shared library for this machine: from the cache, or compiled now."""
    compiler = find_compiler()
    target = library_dir() / f"minillm_cpu_kernels-{cache_key(compiler)}.so"
    if target.exists():
        return target, 0.0
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
    start = time.perf_counter()
    try:
        done = subprocess.run(compile_command(compiler, partial), capture_output=True,
                              text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            raise BuildError(f"compiling minillm's CPU kernels failed:\n{done.stderr.strip()}")
        os.replace(partial, target)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"compiling minillm's CPU kernels failed: {err}") from err
    finally:
        partial.unlink(missing_ok=True)
    return target, time.perf_counter() - start


def library_dir() -> Path:
    return model_cache_dir() / "cpu_kernels"


def cache_key(compiler: str) -> str:
    """A hash of everything the library depends on: sources, flags, compiler, CPU."""
    digest = hashlib.sha256()
    for name in (*SOURCES, *HEADERS):
        digest.update((SOURCE_DIR / name).read_bytes())
    digest.update(" ".join(FLAGS).encode())
    digest.update(_compiler_version(compiler).encode())
    digest.update(_cpu_description().encode())
    return digest.hexdigest()[:16]


def _compiler_version(compiler: str) -> str:
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"cannot run the C++ compiler {compiler!r}: {err}") from err


def _cpu_description() -> str:
    """The CPU's model name and feature flags (what -march=native compiles for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() + platform.processor()
    keep = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in keep}))
