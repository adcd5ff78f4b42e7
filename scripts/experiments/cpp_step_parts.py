"""Issue 18: where a batch-16 decode step's time goes with the "cpp" backend.
    .venv/bin/python scripts/experiments/cpp_step_parts.py float32|bfloat16 [BATCH]

Replays a real decode step (`captured_steps.py`: BATCH sequences at ~128 tokens of
context, default 16) through the model with the engine's backend, and times every call
of each part by wrapping it (perf_counter around the call, summed per step): the layer
matmuls (`Linear.forward`), the tied lm_head product, and each C++ kernel (paged
attention, add+RMSNorm, RoPE, SiLU·up; the Python wrapper included). "rest" is the step
minus those: the embedding, rotary tables, views and the Python of 30 layers. Prints
the median step without wrappers, with the layers fused into one C++ call each (the
engine's default for such a step: `cpu_kernels/decoder_layer.py`, change 14) and layer by
layer, then the parts of the median wrapped step, layer by layer (a fused layer's
kernels are called from C++, out of the wrappers' reach), ms, over 25 replays each."""
import sys
import time
from collections import defaultdict

import torch

from captured_steps import decode_batches, median_ms, replay            # this folder
from minillm import LLM
import minillm.model.llama as model_module
from minillm_cpu.kernels import CpuKernels
from minillm_cpu.packed_linear import Linear

PARTS = {"matmuls (120 Linear)": (Linear, "forward"),
         "lm_head": (model_module, "linear"),
         "paged_attention": (CpuKernels, "paged_attention"),
         "add_rms_norm": (CpuKernels, "add_rms_norm"),
         "rope_": (CpuKernels, "rope_"),
         "silu_and_mul": (CpuKernels, "silu_and_mul")}


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
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype)
    batch = decode_batches(llm, sizes=(batch_size,))[batch_size]
    runner = llm.llm_engine.runner
    print(f"{dtype}, batch {batch_size}, backend {runner.backend.name}, "
          f"{torch.get_num_threads()} threads")

    def forward():
        return replay(runner, batch)
    fusable = hasattr(runner.backend, "fuse_layers")
    for fuse in ((True, False) if fusable else (False,)):
        if fusable:
            runner.backend.fuse_layers = fuse
        for _ in range(5):
            forward()
        how = "layers fused" if fuse else "layer by layer"
        print(f"median step, unwrapped, {how}: {median_ms(forward, replays):.1f} ms")

    spent = defaultdict(float)
    originals = {part: getattr(owner, name) for part, (owner, name) in PARTS.items()}
    for part, (owner, name) in PARTS.items():
        setattr(owner, name, timed(spent, part, originals[part]))
    try:
        steps = []
        for _ in range(replays):
            spent.clear()
            start = time.perf_counter()
            forward()
            steps.append((time.perf_counter() - start, dict(spent)))
    finally:
        for part, (owner, name) in PARTS.items():
            setattr(owner, name, originals[part])
    total, parts = sorted(steps, key=lambda s: s[0])[replays // 2]
    print(f"median step, wrapped: {total * 1e3:.1f} ms")
    for part, seconds in parts.items():
        print(f"  {part:22s} {seconds * 1e3:6.1f} ms  {seconds / total:5.1%}")
    rest = total - sum(parts.values())
    print(f"  {'rest':22s} {rest * 1e3:6.1f} ms  {rest / total:5.1%}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32",
         int(sys.argv[2]) if len(sys.argv) > 2 else 16)
