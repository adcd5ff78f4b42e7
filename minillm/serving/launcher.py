"""Start `python -m minillm serve` as a subprocess, and always stop it.

    with ServerProcess("--max-num-seqs", "8") as server:
        client = openai.OpenAI(base_url=server.url("/v1"), api_key="none")
        ...
    # stopped here, also when the block raised

Tests, lesson 12 and the benchmark all start servers this way:

* `--port 0`: the server binds a free port and prints it, so two servers never race
  for one port;
* the server runs in its own process group (`start_new_session`), so stopping it
  (SIGTERM, then SIGKILL after a grace period) stops everything it started;
* `stop()` is registered with `atexit` too, and on Linux the child asks the kernel to
  send it SIGTERM when its parent dies (`PR_SET_PDEATHSIG`), so a crashed notebook
  kernel or test run does not leave a server behind. (That signal follows the parent
  *thread*: start servers from the main thread.)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time

import httpx

READY_LINE = re.compile(r"listening on (http://\S+)")


def _die_with_parent() -> None:                        # runs in the child, before exec
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


class ServerProcess:
    def __init__(self, *flags: str, model: str = "smollm2-135m", host: str = "127.0.0.1",
                 startup_timeout: float = 180.0, env: dict | None = None):
        self.command = [sys.executable, "-m", "minillm", "serve", "--model", model,
                        "--host", host, "--port", "0", *flags]
        self.startup_timeout = startup_timeout
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
        self.process: subprocess.Popen | None = None
        self.base_url: str | None = None
        self._log = None

    # ------------------------------------------------------------ start
    def start(self) -> "ServerProcess":
        self._log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=self._log, text=True, env=self.env,
            start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        atexit.register(self.stop)
        try:
            self.base_url = self._wait_for_address()
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_address(self) -> str:
        deadline = time.monotonic() + self.startup_timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(timeout=0.5):
                    line = self.process.stdout.readline()
                    match = READY_LINE.search(line)
                    if match:
                        return match.group(1)
                    if not line and self.process.poll() is not None:
                        break
                elif self.process.poll() is not None:
                    break
        raise RuntimeError(f"the server did not start ({self._why()})")

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self._why()})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url("/health"), timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"/health did not answer 200 within 60 s ({self._why()})")

    def _why(self) -> str:
        code = self.process.poll() if self.process else None
        return f"exit code {code}; log tail:\n{self.log()[-3000:]}"

    # ------------------------------------------------------------ use
    def url(self, path: str = "") -> str:
        return f"{self.base_url}{path}"

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        if self._log is None or self._log.closed:
            return ""
        self._log.seek(0)
        return self._log.read()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    # ------------------------------------------------------------ stop
    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM the server's process group, SIGKILL it after `grace` s; the exit code."""
        proc = self.process
        if proc is None:
            return None
        atexit.unregister(self.stop)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):   # anything left in its group
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
        if proc.stdout:
            proc.stdout.close()
        return code

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
