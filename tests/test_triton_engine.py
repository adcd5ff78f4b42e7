"""The engine on the Triton backend gives the same greedy tokens as on the torch one.

On CPU the kernels run in Triton's interpreter, so the model is tiny; on a CUDA machine
the same test compiles them for real.
"""

from __future__ import annotations

import pytest
import torch

from minillm import LLM, SamplingParams
from minillm_cpu.kernels import unavailable_reason
from minillm.llm import resolve_backend, resolve_device
from minillm.model.tiny import build_tiny_llama

PROMPTS = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (1, 6, 19, 11)]
PARAMS = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (9, 4, 7, 12)]


def run(backend, **kwargs):
    llm = LLM(build_tiny_llama(seed=2), attention_backend=backend, block_size=8,
              max_num_seqs=4, **kwargs)
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
def test_device_and_backend_selection_is_explicit(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == torch.device("cpu")
    cpp_builds = unavailable_reason() is None            # a C++ compiler is here
    assert resolve_backend("auto", torch.device("cpu")) == ("cpp" if cpp_builds else "sparse")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(None) == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")          # an argument wins
    assert resolve_backend("auto", torch.device("cuda")) == "triton"
    assert resolve_backend("torch", torch.device("cuda")) == "torch"
