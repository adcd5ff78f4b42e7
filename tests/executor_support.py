"""Which executors run here, asked by the fixtures in conftest.py and by tests that need
the answer at import or check time (a helper module, not conftest: pytest loads two
conftest.py files, tests/ and tests/exercises/, so `import conftest` names either)."""

from __future__ import annotations

import torch


def cpu_executor_reason(model_config=None) -> str | None:
    """Why the "cpu" executor cannot run fp32 models shaped like `model_config` (default:
    SmolLM2's) here, None if it can: MINILLM_EXECUTOR=eager keeps it out, or its kernels
    do not build."""
    from minillm.model.executor import EXECUTORS, load_plugins
    load_plugins()
    if "cpu" not in EXECUTORS:
        return "the minillm_cpu plugin is not loaded (not installed, or MINILLM_EXECUTOR=eager)"
    config = model_config or type("Config", (), {
        "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576, "head_dim": 64})()
    return EXECUTORS["cpu"]().unavailable_reason(torch.device("cpu"), torch.float32, config)
