"""Device and dtype choice (`minillm/model/device.py`), including GPUs this machine does not have.

The CUDA paths are forced by replacing `torch.cuda`'s queries (is a GPU there, its name,
its compute capability) with monkeypatch: the choice is pure logic over those answers.
The fp16 test at the end runs the engine on the Triton backend in float16, what a GPU
without bf16 (a T4) gets, against the torch backend in float16.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from minillm import LLM, SamplingParams
from minillm.model.device import resolve_device, resolve_dtype
from minillm.model.tiny import build_tiny_llama

CUDA = torch.device("cuda")


def fake_gpu(monkeypatch, name: str, capability: tuple[int, int]) -> None:
    """Make torch report one CUDA GPU called `name` with this compute capability."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    # The emulation-counting check says True even on a T4: the choice must not rely on it.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


@pytest.mark.unit
def test_cpu_default_is_float32_and_explicit_dtype_wins():
    cpu = torch.device("cpu")
    assert resolve_dtype(None, cpu) is torch.float32
    assert resolve_dtype("auto", cpu) is torch.float32
    assert resolve_dtype(torch.float16, cpu) is torch.float16
    assert resolve_dtype("bfloat16", cpu) is torch.bfloat16


@pytest.mark.unit
@pytest.mark.parametrize("name, capability", [("NVIDIA H200", (9, 0)), ("NVIDIA A100-SXM4-80GB", (8, 0))])
def test_gpu_with_bf16_defaults_to_bf16_silently(monkeypatch, name, capability):
    fake_gpu(monkeypatch, name, capability)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # no warning on a bf16 GPU
        assert resolve_dtype(None, CUDA) is torch.bfloat16
        assert resolve_dtype(torch.bfloat16, CUDA) is torch.bfloat16


@pytest.mark.unit
@pytest.mark.parametrize("name, capability", [("Tesla T4", (7, 5)), ("Tesla V100-SXM2-16GB", (7, 0))])
def test_gpu_without_bf16_falls_back_to_fp16_and_says_why(monkeypatch, name, capability):
    fake_gpu(monkeypatch, name, capability)
    with pytest.warns(UserWarning, match=rf"{name} \(compute capability {capability[0]}\.{capability[1]}\)"
                                         r".*no bf16.*float16"):
        assert resolve_dtype(None, CUDA) is torch.float16
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # an explicit choice needs no warning
        assert resolve_dtype("float16", CUDA) is torch.float16
        assert resolve_dtype(torch.float32, CUDA) is torch.float32


@pytest.mark.unit
def test_every_name_engine_config_accepts_resolves_through_one_table(monkeypatch):
    """EngineConfig, the command lines and `resolve_dtype` share one table of names
    (`minillm/model/device.py: DTYPES`): on a T4 the default must be fp16, not the bf16
    every GPU used to get."""
    from minillm.config import EngineConfig
    from minillm.model.device import DTYPES
    for name, dtype in DTYPES.items():
        assert EngineConfig(dtype=name).dtype == name
        assert resolve_dtype(name, torch.device("cpu")) is dtype
    fake_gpu(monkeypatch, "Tesla T4", (7, 5))
    with pytest.warns(UserWarning, match="Tesla T4"):
        assert resolve_dtype(None, CUDA) is torch.float16
    assert resolve_dtype("half", CUDA) is torch.float16
    with pytest.raises(ValueError, match="float16"):
        resolve_dtype("bfloat16", CUDA)
    fake_gpu(monkeypatch, "NVIDIA H200", (9, 0))
    assert resolve_dtype("auto", CUDA) is torch.bfloat16


@pytest.mark.unit
def test_explicit_bf16_on_a_gpu_without_it_is_refused(monkeypatch):
    fake_gpu(monkeypatch, "Tesla T4", (7, 5))
    with pytest.raises(ValueError, match=r"Tesla T4 \(compute capability 7\.5\).*dtype='float16'"):
        resolve_dtype(torch.bfloat16, CUDA)


@pytest.mark.unit
@pytest.mark.parametrize("bad", [torch.float64, torch.int8, "fp16", "double", 16])
def test_unknown_dtype_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="dtype must be None, 'auto', one of"):
        resolve_dtype(bad, torch.device("cpu"))


@pytest.mark.unit
def test_resolve_device_picks_cuda_only_where_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")


@pytest.mark.kernels
def test_triton_engine_runs_in_float16_like_on_a_t4():
    """The whole engine on the Triton kernels in float16 (the no-bf16 fallback) gives the
    same greedy tokens as the torch backend in float16. On CPU the kernels run in the
    interpreter, which computes fp16 like the GPU does (bf16 it cannot: kernels/_checks.py).
    """
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (1, 6, 19)]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    tokens = {}
    for backend in ("torch", "triton"):
        llm = LLM(build_tiny_llama(seed=2), attention_backend=backend, dtype=torch.float16,
                  block_size=8, max_num_seqs=4, enable_chunked_prefill=True,
                  max_num_batched_tokens=8)
        tokens[backend] = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        assert llm.trace.config["dtype"] == "float16"
        assert llm.model.embed_tokens.weight.dtype == torch.float16
    assert tokens["triton"] == tokens["torch"]
    assert all(len(t) == 6 for t in tokens["triton"])
