"""minillm — a small but complete LLM inference engine, built lesson by lesson.

The public API mirrors vLLM's (`LLM`, `SamplingParams`, `LLMEngine`, `RequestOutput`)
so a script moves to vLLM by changing one import. See DESIGN.md §2 for the data flow:

    LLM.generate → LLMEngine.step → Scheduler.schedule → Runner.execute → update → Trace
"""

from minillm.sampling_params import SamplingParams
from minillm.outputs import CompletionOutput, RequestMetrics, RequestOutput

__all__ = ["LLM", "LLMEngine", "SamplingParams", "RequestOutput", "CompletionOutput",
           "RequestMetrics", "Trace"]


def __getattr__(name):
    # torch-heavy parts load on first use, so `import minillm` stays fast for the
    # simulator and the widgets
    if name == "LLM":
        from minillm.llm import LLM
        return LLM
    if name == "LLMEngine":
        from minillm.engine import LLMEngine
        return LLMEngine
    if name == "Trace":
        from minillm.trace import Trace
        return Trace
    raise AttributeError(f"module 'minillm' has no attribute {name!r}")
