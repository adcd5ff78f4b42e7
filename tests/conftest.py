"""Shared fixtures. The real model is loaded once per test session."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from executor_support import cpu_executor_reason  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    """(transformers model, tokenizer) for SmolLM2-135M-Instruct in fp32."""
    from minillm.model.loader import load_hf_model
    model, tokenizer = load_hf_model("smollm2-135m")
    return model, tokenizer


@pytest.fixture(scope="session")
def smollm2_llm(smollm2):
    """One continuous-batching LLM on the real model, shared by read-only tests."""
    from minillm import LLM
    model, tokenizer = smollm2
    return LLM(model, tokenizer=tokenizer, max_num_seqs=8, num_kv_blocks=256)


@pytest.fixture
def tiny_hf():
    from minillm.model.tiny import build_tiny_llama
    return build_tiny_llama(seed=0)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


def pytest_addoption(parser):
    parser.addoption("--exercises-from", choices=("exercises", "solutions"), default=None,
                     help="grade the exercise tests against the learner's stubs or the "
                          "solutions (default: solutions in the suite; the grading "
                          "command sets exercises)")
    engine = parser.getgroup("engine", "where the oracle tests run the engine "
                                       "(scripts/gpu_check.sh sets cuda, triton, float32)")
    engine.addoption("--engine-device", choices=("cpu", "cuda"), default=None,
                     help="device of the engine under test (default: the engine's own choice)")
    engine.addoption("--engine-backend", choices=("cpp", "sparse", "torch", "triton", "reference"),
                     default=None,
                     help="attention backend (default: auto, triton on CUDA, cpp on CPU)")
    engine.addoption("--engine-dtype", choices=("float32", "float16", "bfloat16"), default=None,
                     help="engine dtype (default: auto); transformers, the oracle, runs in "
                          "float32, so exact greedy agreement is expected in float32 only")
    engine.addoption("--engine-executor", choices=("eager", "cpu"), default=None,
                     help="run the oracle tests on this executor only (default: every "
                          "executor that runs here)")


@pytest.fixture(scope="session")
def engine_options(request) -> dict:
    """`LLM` keyword arguments from `--engine-device/--engine-backend/--engine-dtype`.

    Empty unless given, so the oracle tests run wherever the engine would by default.
    `{"device": "cuda", "attention_backend": "triton", "dtype": "float32"}` checks the
    Triton kernels on a GPU against transformers on the CPU.
    """
    dtype = request.config.getoption("--engine-dtype")
    chosen = {"device": request.config.getoption("--engine-device"),
              "attention_backend": request.config.getoption("--engine-backend"),
              "dtype": getattr(torch, dtype) if dtype else None}
    return {key: value for key, value in chosen.items() if value is not None}


@pytest.fixture(scope="session")
def executors_under_test(request) -> list[str]:
    """The executors the oracle tests compare: `--engine-executor`, else "eager" and,
    where it runs, "cpu" (never on a CUDA engine: it is a CPU executor)."""
    chosen = request.config.getoption("--engine-executor")
    if chosen:
        return [chosen]
    on_cuda = request.config.getoption("--engine-device") == "cuda"
    return ["eager"] + ([] if on_cuda or cpu_executor_reason() else ["cpu"])


@pytest.fixture
def cpu_executor():
    """Skip a test about the "cpu" executor where it cannot run."""
    reason = cpu_executor_reason()
    if reason:
        pytest.skip(reason)


def pytest_configure(config):
    from minillm.grading import TARGET_ENV
    chosen = config.getoption("--exercises-from")
    if chosen:
        os.environ[TARGET_ENV] = chosen
    else:
        os.environ.setdefault(TARGET_ENV, "solutions")
