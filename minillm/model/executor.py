"""Executors: how the model is run once it is loaded — as written, or with faster parts.

The engine always calls the same `LlamaModel.forward` (`llama.py`). An executor may,
once, when the model is loaded, swap some of its modules for others that compute the
same thing faster on some hardware (a packed matmul for `nn.Linear`, one loop for
`RMSNorm`, a whole stack of layers in one call) — the way a car keeps its shape when the
engine is tuned. The file a learner reads never changes for it.

    EXECUTORS["eager"]     the readable model, exactly as `llama.py` writes it
    EXECUTORS[<plugin>]    added by a package outside minillm (see below)

`LLM(executor="auto")` takes a plugin's executor where it says it can run (e.g. a CPU
executor on a CPU where its kernels build), else "eager". The environment variable
`MINILLM_EXECUTOR=eager` keeps every plugin out, so the whole course runs the readable
engine. Both executors give the same greedy tokens (tests/test_engine_oracle.py).

**Plugins.** A package declares an entry point in the group "minillm.plugins" (in its
`pyproject.toml`); `load_plugins()` calls each one once, and it adds its executor here
and its attention backends to `minillm.attention.BACKENDS`. vLLM finds its platform and
general plugins the same way.
"""

from __future__ import annotations

import os
import warnings
from functools import cache
from importlib.metadata import entry_points

import torch

PLUGIN_GROUP = "minillm.plugins"
FORCE_VARIABLE = "MINILLM_EXECUTOR"


class Executor:
    """What the engine asks an executor; the defaults are the readable model's answers,
    and a plugin's executor overrides what it changes."""

    name = "base"

    def unavailable_reason(self, device: torch.device, dtype: torch.dtype,
                           model_config) -> str | None:
        """Why this executor cannot run this model here (None: it can)."""
        return None

    def attention_backend(self, device: torch.device, dtype: torch.dtype) -> str:
        """The attention backend `attention_backend="auto"` means with this executor."""
        return "triton" if device.type == "cuda" else "sparse"

    def load(self, model, config):
        """The model this executor runs, given the readable one (here: unchanged).

        `config` is the EngineConfig as the caller gave it: the model-dependent defaults
        (`max_model_len`, `num_kv_blocks`, ...) may still be None here, since they are
        filled in from the loaded model afterwards (`EngineConfig.for_model`)."""
        return model


class EagerExecutor(Executor):
    """The readable model, exactly as `llama.py` writes it."""

    name = "eager"


EXECUTORS: dict[str, type[Executor]] = {"eager": EagerExecutor}


def readable_forced() -> bool:
    """True when `MINILLM_EXECUTOR=eager` keeps every plugin out."""
    value = os.environ.get(FORCE_VARIABLE, "")
    if value not in ("", "eager"):
        raise ValueError(f"{FORCE_VARIABLE}={value!r}: the only value it takes is 'eager' "
                         "(run the readable engine everywhere); unset it otherwise")
    return value == "eager"


@cache
def load_plugins() -> tuple[str, ...]:
    """Call every installed minillm plugin once; the names of those that loaded."""
    if readable_forced():
        return ()
    loaded = []
    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            entry.load()()
        except Exception as err:          # noqa: BLE001 — a broken plugin must not stop minillm
            warnings.warn(f"minillm plugin {entry.name!r} failed to load ({err}); "
                          "running without it", stacklevel=2)
        else:
            loaded.append(entry.name)
    return tuple(loaded)


def resolve_executor(name: str, device: torch.device, dtype: torch.dtype,
                     model_config) -> Executor:
    """The executor for `name` ("auto", "eager" or a plugin's); a ValueError says why
    one that was asked for cannot run."""
    load_plugins()
    forced = readable_forced()           # read now: it may be set after plugins loaded
    available = ("eager",) if forced else tuple(EXECUTORS)
    if name == "auto":
        for candidate in (n for n in available if n != "eager"):
            executor = EXECUTORS[candidate]()
            if executor.unavailable_reason(device, dtype, model_config) is None:
                return executor
        return EagerExecutor()
    if name not in available:
        hint = f" ({FORCE_VARIABLE}=eager keeps plugins out)" if forced else ""
        raise ValueError(f"executor must be 'auto' or one of {available}{hint}, got {name!r}")
    executor = EXECUTORS[name]()
    reason = executor.unavailable_reason(device, dtype, model_config)
    if reason:
        raise ValueError(f"executor={name!r} cannot run here: {reason}. Use "
                         "executor='eager' (the readable model) or 'auto'.")
    return executor


def executor_names() -> tuple[str, ...]:
    """"auto" and every executor registered (plugins loaded first)."""
    load_plugins()
    return ("auto", "eager") if readable_forced() else ("auto", *EXECUTORS)
