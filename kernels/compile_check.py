"""Compile every kernel for a real NVIDIA GPU (sm_90, H100/H200) on a machine without one.

The interpreter (`TRITON_INTERPRET=1`) type-checks a kernel like the compiler does,
then runs each operation as numpy code. It never lowers the kernel to GPU code, so
anything that only fails in that lowering (an op or layout the backend cannot generate,
a lowering bug for an unusual shape) goes unnoticed until the kernel meets a GPU.
Triton's compiler itself needs no GPU: it lowers the kernel to PTX and runs the bundled
`ptxas` to a cubin. So this check, run on a laptop, tells you whether the kernel would
at least *build* on a GPU, and how much shared memory each variant needs. It does not
run anything, so it says nothing about speed or about out-of-bounds accesses.

Usage::

    python -m kernels.compile_check            # prints one line per kernel variant

It uses `triton.compiler.ASTSource` and `GPUTarget` (Triton 3.x internals): each
argument gets a type string (`"*fp16"` pointer, `"i32"`, `"fp32"`) or is bound as a
compile-time constant (`tl.constexpr`), exactly what a launch would infer.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys


def _compile_all(arch: int = 90) -> list[str]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # importlib, not `from . import store_kv`: the package re-exports a *function* of
    # that name, which shadows the submodule as an attribute.
    paged_decode = importlib.import_module("kernels.paged_decode")
    paged_prefill = importlib.import_module("kernels.paged_prefill")
    store_kv = importlib.import_module("kernels.store_kv")

    target = GPUTarget("cuda", arch, 32)
    lines = []

    def build(kernel, name, types, constants):
        names = kernel.arg_names
        signature = {n: "constexpr" if n in constants else types.get(n, "i32") for n in names}
        constexprs = {(names.index(n),): v for n, v in constants.items()}
        compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                                  target=target, options={"num_warps": 4})
        assert "cubin" in compiled.asm, f"{name}: no cubin produced"
        lines.append(f"{name:<40} ok   shared memory {compiled.metadata.shared:>6} bytes")

    for dtype in ("fp16", "bf16", "fp32"):
        precision = "ieee" if dtype == "fp32" else "tf32"
        attention_ptrs = {n: "*" + dtype for n in ("q_ptr", "k_cache_ptr", "v_cache_ptr", "out_ptr")}
        build(store_kv._store_kv_kernel, f"store_kv {dtype}",
              {**{n: "*" + dtype for n in ("key_ptr", "value_ptr", "k_cache_ptr", "v_cache_ptr")},
               "slot_mapping_ptr": "*i64"},
              dict(NUM_KV_HEADS=3, HEAD_DIM=64, BLOCK_H=4, BLOCK_D=64))
        build(paged_decode._paged_decode_kernel, f"paged_decode {dtype} D=128 group=4",
              {**attention_ptrs, "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32", "qk_scale": "fp32"},
              dict(GROUP=4, HEAD_DIM=128, BLOCK_G=16, BLOCK_D=128, BLOCK_N=paged_decode.BLOCK_N,
                   DOT_PRECISION=precision))
        build(paged_prefill._paged_prefill_kernel, f"paged_prefill {dtype} D=128 group=4",
              {**attention_ptrs, "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32",
               "query_start_loc_ptr": "*i32", "qk_scale": "fp32"},
              dict(GROUP=4, HEAD_DIM=128, BLOCK_Q=16, BLOCK_M=64, BLOCK_D=128,
                   BLOCK_N=paged_prefill.BLOCK_N, DOT_PRECISION=precision))
    # Triton turns an int argument equal to 1 into a constant: check the B == 1 variant,
    # the loop-carried binary search must still type-check.
    build(paged_prefill._paged_prefill_kernel, "paged_prefill fp16 B=1 group=3 D=64",
          {n: "*fp16" for n in ("q_ptr", "k_cache_ptr", "v_cache_ptr", "out_ptr")}
          | {"block_tables_ptr": "*i64", "seq_lens_ptr": "*i64", "query_start_loc_ptr": "*i64",
             "qk_scale": "fp32"},
          dict(num_seqs=1, GROUP=3, HEAD_DIM=64, BLOCK_Q=21, BLOCK_M=64, BLOCK_D=64,
               BLOCK_N=paged_prefill.BLOCK_N, DOT_PRECISION="tf32"))
    return lines


def main() -> int:
    from ._checks import interpreter_enabled

    if interpreter_enabled():
        # Kernels defined under the interpreter are not compilable objects: start over
        # in a fresh process with the interpreter off.
        env = dict(os.environ, TRITON_INTERPRET="0")
        return subprocess.call([sys.executable, "-m", "kernels.compile_check"], env=env)
    for line in _compile_all():
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
