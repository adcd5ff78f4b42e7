"""docs/performance.md, changes 12b-14: where a decode step's time goes on the "cpu" executor.
    .venv/bin/python scripts/experiments/cpp_step_parts.py [float32|bfloat16] [BATCH]

Replays a real decode step (`captured_steps.py`: BATCH sequences at ~128 tokens of
context, default 16) through the model the "cpu" executor loaded (`minillm_cpu`: its
modules swapped at load, attention backend "cpp"). Prints the median step without
wrappers, with the layers fused into one C++ call (`FusedDecoderStack`, the default for
such a step, change 14) and layer by layer (`llm.model.layers.fused = False`). Then,
layer by layer (a fused step's kernels are called from C++, out of Python's reach), it
times every call of each part by wrapping it (perf_counter around the call, summed per
step): the 120 layer matmuls (`PackedLinear`), the tied lm_head product, and each C++
kernel (paged attention, RMSNorm, RoPE, SiLU·up; the Python wrapper included). "rest" is
the step minus those: the embedding, residual adds, rotary tables, views and the Python
of 30 layers. Medians over 25 replays each, ms."""
import sys
import time
from collections import defaultdict

import torch

from captured_steps import decode_batches, median_ms, replay            # this folder
from minillm import LLM
from minillm_cpu.kernels import CpuKernels
from minillm_cpu.packed_linear import PackedLinear

KERNELS = {"paged_attention": "paged_attention", "rms_norm": "add_rms_norm",
           "rope_": "rope_", "silu_and_mul": "silu_and_mul"}      # part: CpuKernels method


def timed(spent: dict, part: str, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - start
    return wrapper


def main(dtype: str, batch_size: int, replays: int = 25) -> None:
    torch.set_num_threads(2)
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype,
              executor="cpu")
    batch = decode_batches(llm, sizes=(batch_size,))[batch_size]
    runner, stack = llm.llm_engine.runner, llm.model.layers
    print(f"{dtype}, batch {batch_size}, backend {runner.backend.name}, "
          f"{torch.get_num_threads()} threads")

    def forward():
        return replay(runner, batch)
    for fused in (True, False):
        stack.fused = fused
        for _ in range(5):
            forward()
        how = "layers fused (if the step qualifies)" if fused else "layer by layer"
        print(f"median step, unwrapped, {how}: {median_ms(forward, replays):.1f} ms")

    spent = defaultdict(float)      # stack.fused is False here: every call goes through Python
    linears = [(name, m) for name, m in llm.model.named_modules() if isinstance(m, PackedLinear)]
    for name, module in linears:   # an instance attribute shadows the class's forward
        part = "lm_head" if name == "lm_head" else "matmuls (120 layer)"
        module.forward = timed(spent, part, module.forward)
    originals = {part: getattr(CpuKernels, method) for part, method in KERNELS.items()}
    for part, method in KERNELS.items():
        setattr(CpuKernels, method, timed(spent, part, originals[part]))
    try:
        steps = []
        for _ in range(replays):
            spent.clear()
            start = time.perf_counter()
            forward()
            steps.append((time.perf_counter() - start, dict(spent)))
    finally:
        for part, method in KERNELS.items():
            setattr(CpuKernels, method, originals[part])
        for _, module in linears:
            del module.forward
        stack.fused = True
    total, parts = sorted(steps, key=lambda s: s[0])[replays // 2]
    print(f"median step, wrapped, layer by layer: {total * 1e3:.1f} ms")
    for part, seconds in parts.items():
        print(f"  {part:22s} {seconds * 1e3:6.1f} ms  {seconds / total:5.1%}")
    rest = total - sum(parts.values())
    print(f"  {'rest':22s} {rest * 1e3:6.1f} ms  {rest / total:5.1%}")


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    main(sys.argv[1] if len(sys.argv) > 1 else "float32",
         int(sys.argv[2]) if len(sys.argv) > 2 else 16)
