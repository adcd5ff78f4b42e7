"""The engine on the Triton backend gives the same greedy tokens as on the torch one.

On CPU the kernels run in Triton's interpreter, so the model is tiny; on a CUDA machine
the same test compiles them for real.
"""

from __future__ import annotations

import pytest
import torch

from minillm import LLM, SamplingParams
from minillm.model.device import resolve_device
from minillm.model.executor import EXECUTORS, resolve_executor
from minillm.model.tiny import build_tiny_llama

PROMPTS = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (1, 6, 19, 11)]
PARAMS = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (9, 4, 7, 12)]


def run(backend, **kwargs):
    llm = LLM(build_tiny_llama(seed=2), executor="eager", attention_backend=backend,
              block_size=8, max_num_seqs=4, **kwargs)
    outs = llm.generate(PROMPTS, PARAMS, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs], llm


@pytest.mark.kernels
@pytest.mark.parametrize("kwargs", [dict(), dict(enable_chunked_prefill=True,
                                                 max_num_batched_tokens=8)],
                         ids=["continuous", "chunked"])
def test_triton_backend_matches_torch_backend(kwargs):
    want, _ = run("torch", **kwargs)
    got, llm = run("triton", **kwargs)
    assert llm.trace.config["attention_backend"] == "triton"
    assert got == want
    if kwargs:
        mixed = [s for s in llm.trace.steps if s.num_prefill_tokens and s.num_decode_tokens]
        assert mixed, "the chunked run must mix prefill chunks and decodes in one step"


@pytest.mark.unit
def test_device_executor_and_backend_selection_is_explicit(monkeypatch):
    """CPU: the "cpu" executor and its "cpp" attention where they run, else the readable
    model on "sparse"; CUDA: the readable model on the Triton kernels."""
    config = build_tiny_llama(seed=0).config
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = resolve_device(None)
    assert cpu == torch.device("cpu")
    auto = resolve_executor("auto", cpu, torch.float32, config)
    fast = "cpu" in EXECUTORS and EXECUTORS["cpu"]().unavailable_reason(
        cpu, torch.float32, config) is None
    assert (auto.name, auto.attention_backend(cpu, torch.float32)) == (
        ("cpu", "cpp") if fast else ("eager", "sparse"))
    eager = resolve_executor("eager", cpu, torch.float32, config)
    assert (eager.name, eager.attention_backend(cpu, torch.float32)) == ("eager", "sparse")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = resolve_device(None)
    assert cuda == torch.device("cuda") and resolve_device("cpu") == cpu   # an argument wins
    auto = resolve_executor("auto", cuda, torch.bfloat16, config)
    assert (auto.name, auto.attention_backend(cuda, torch.bfloat16)) == ("eager", "triton")
