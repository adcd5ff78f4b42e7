"""Executors: the registry, plugins found by entry point, and the switch that keeps them out.

Each case runs in a fresh interpreter: plugins load once per process
(`minillm/model/executor.py: load_plugins`), and `MINILLM_EXECUTOR` is read then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

PROBE = textwrap.dedent("""
    import torch
    from minillm.attention import BACKENDS, make_attention_backend
    from minillm.model.executor import EXECUTORS, executor_names, resolve_executor
    from minillm.model.tiny import build_tiny_llama
    print(executor_names())
    config = build_tiny_llama(seed=0).config
    print(resolve_executor("auto", torch.device("cpu"), torch.float32, config).name)
    for ask in (lambda: resolve_executor("cpu", torch.device("cpu"), torch.float32, config),
                lambda: make_attention_backend("cpp")):
        try:
            print(type(ask()).__name__)
        except ValueError as error:
            print("ValueError:", error)
""")


def probe(forced: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "MINILLM_EXECUTOR"}
    if forced is not None:
        env["MINILLM_EXECUTOR"] = forced
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, env=env)
    return (done.stdout + done.stderr).strip().splitlines()


def test_the_plugin_registers_itself_and_forcing_eager_keeps_it_out(cpu_executor):
    names, auto, executor, backend = probe(None)[-4:]
    assert names == "('auto', 'eager', 'cpu')" and auto == "cpu"
    assert (executor, backend) == ("CpuExecutor", "CppAttention")
    names, auto, executor, backend = probe("eager")[-4:]
    assert names == "('auto', 'eager')" and auto == "eager"
    assert executor.startswith("ValueError: executor must be 'auto' or one of ('eager',)")
    assert "MINILLM_EXECUTOR=eager keeps plugins out" in executor
    assert backend.startswith("ValueError: attention_backend must be 'auto' or one of")


def test_a_misspelt_switch_is_an_error_that_names_it():
    output = "\n".join(probe("eagre"))
    assert "MINILLM_EXECUTOR='eagre'" in output and "'eager'" in output


def test_a_plugin_that_fails_to_load_warns_and_minillm_runs_without_it(monkeypatch):
    """A broken plugin must not take the readable engine down with it."""
    from importlib import metadata

    from minillm.model import executor

    class Broken:
        name = "broken"

        def load(self):
            raise ImportError("no such module")

    monkeypatch.setattr(executor, "entry_points", lambda group: [Broken()])
    monkeypatch.setattr(executor, "readable_forced", lambda: False)
    executor.load_plugins.cache_clear()
    try:
        with pytest.warns(UserWarning, match="'broken' failed to load"):
            assert executor.load_plugins() == ()
    finally:
        executor.load_plugins.cache_clear()
    assert metadata.entry_points(group=executor.PLUGIN_GROUP)    # the real one is installed


def test_forcing_eager_after_the_plugins_loaded_still_holds(monkeypatch, cpu_executor):
    """A notebook that sets MINILLM_EXECUTOR=eager after an engine was built (plugins
    loaded) gets the readable engine from then on, not the plugin that is still loaded."""
    import torch

    from minillm.model.executor import EagerExecutor, executor_names, resolve_executor
    from minillm.model.tiny import build_tiny_llama
    config, cpu = build_tiny_llama(seed=0).config, torch.device("cpu")
    assert resolve_executor("auto", cpu, torch.float32, config).name == "cpu"
    monkeypatch.setenv("MINILLM_EXECUTOR", "eager")
    assert isinstance(resolve_executor("auto", cpu, torch.float32, config), EagerExecutor)
    assert executor_names() == ("auto", "eager")
    with pytest.raises(ValueError, match="MINILLM_EXECUTOR=eager keeps plugins out"):
        resolve_executor("cpu", cpu, torch.float32, config)


def test_an_attention_backend_that_cannot_run_the_model_is_refused_at_load(cpu_executor):
    """Asked for by name, the `cpp` backend is held to the same conditions as the "cpu"
    executor (here: no float16 kernels) when the engine is built, not at its first step."""
    from minillm import LLM
    from minillm.model.tiny import build_tiny_llama
    with pytest.raises(ValueError, match="attention_backend='cpp' cannot run here.*float16"):
        LLM(build_tiny_llama(seed=0), executor="eager", attention_backend="cpp", dtype="float16")


@pytest.mark.parametrize("command", [["generate", "hi"], ["serve", "--port", "0"]])
def test_the_command_lines_name_a_misspelt_switch(command):
    env = {**os.environ, "MINILLM_EXECUTOR": "fast"}
    done = subprocess.run([sys.executable, "-m", "minillm", *command], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 2 and "error: MINILLM_EXECUTOR='fast'" in done.stderr, done.stderr
