"""minillm — a small but complete LLM inference engine, built lesson by lesson.

The public API mirrors vLLM's (`LLM`, `SamplingParams`, `LLMEngine`, `RequestOutput`)
so a script moves to vLLM by changing one import. One request's path, file by file:

    llm.py → engine/engine.py (make_sequence) → scheduler/ (schedule, with kv_cache/)
           → model/model_runner.py → model/batch.py → model/llama.py (→ attention/)
           → model/sampler.py → engine/engine.py (update) → engine/trace.py, outputs.py

The folders: `engine/` (the loop and its requests), `scheduler/`, `kv_cache/`,
`model/` (forward, runner, sampler, loading), `attention/`, `sim/` (simulator, workloads,
metrics), `serving/` (the OpenAI-compatible server), `widgets/` (the course's views).
"""

import os as _os

import torch as _torch

if not _torch.cuda.is_available():
    # Triton's CPU interpreter must be on before anything imports triton (transformers'
    # model code does); see kernels/__init__.py. It only matters for the triton backend.
    _os.environ.setdefault("TRITON_INTERPRET", "1")

from minillm.outputs import CompletionOutput, RequestMetrics, RequestOutput  # noqa: E402
from minillm.sampling_params import SamplingParams  # noqa: E402

__all__ = ["LLM", "LLMEngine", "SamplingParams", "RequestOutput", "CompletionOutput",
           "RequestMetrics", "Trace"]


def __getattr__(name):
    # the engine's parts load on first use: `from minillm import SamplingParams` does
    # not build the model stack
    if name == "LLM":
        from minillm.llm import LLM
        return LLM
    if name == "LLMEngine":
        from minillm.engine.engine import LLMEngine
        return LLMEngine
    if name == "Trace":
        from minillm.engine.trace import Trace
        return Trace
    raise AttributeError(f"module 'minillm' has no attribute {name!r}")
