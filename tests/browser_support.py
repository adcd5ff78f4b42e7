"""Widgets in a real browser: JupyterLab + headless Chromium (Debian's) + Playwright.

`lab_session()` starts one JupyterLab server and one Chromium for a whole test session;
`check_notebook(session, path)` opens a notebook in it, runs all cells, and for every
widget on the page checks that it rendered, operates its controls the way a learner
would (keyboard on a slider, a dropdown choice, a click on Play / Step), and checks
that its readout (HTML / Label widgets) and its plot (an <img>) changed. It returns a
`NotebookReport` listing every problem, so a test can assert that a good notebook has
none and that a deliberately broken one has the expected ones.

Nothing leaks: every process this module starts carries a marker variable in its
environment (the server, the kernels the server starts, Chromium and its helpers), and
`lab_session()` stops them all by PID on the way out, even when the test body raised,
then asserts that no process with the marker is left.

Pitfalls this module handles (measured on the course's 2-core machine, see
shared/notes/browser-testing.md):
* JupyterLab exits at once as root unless `--ServerApp.allow_root=True`.
* The toolbar can say "idle" before a kernel is attached; Run All then opens a
  "Select Kernel" dialog and runs nothing. We wait, through `window.jupyterapp`
  (`--LabApp.expose_app_in_browser=True`), for a connected idle kernel, and accept the
  dialog if it appears anyway.
* Kernels run in their own process group, so stopping the server's process does not
  stop them: the server is shut down cleanly first, then each kernel it started is
  ended by PID.
* `playwright install` would download a browser and fails here: Playwright launches
  `/usr/bin/chromium` through `executable_path`, and no name lookup leaves the machine.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LESSONS = REPO / "lessons"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
MARKER_VAR = "MINILLM_BROWSER_TEST"          # env variable carried by every process we start

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
    # no name lookup leaves the machine; the Lab server is on 127.0.0.1
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]

LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                     "checkForUpdates": False},
}

SERVER_CONFIG = """\
# written by tests/browser_support.py for one test session
from tornado.web import HTTPError


def _refuse_save(model, path, contents_manager, **kwargs):
    with open({saves!r}, "a") as log:
        log.write(path + "\\n")
    raise HTTPError(403, "the browser tests never save notebooks")


c.ContentsManager.pre_save_hook = _refuse_save
c.FileCheckpoints.checkpoint_dir = {checkpoints!r}   # absolute: not beside the notebooks
"""

INSTALL_HINT = ("install it with `sudo apt-get update && sudo apt-get install -y chromium` "
                "(scripts/setup.sh does this when run as root)")


# ---------------------------------------------------------------------- what is needed

def browser_tests_run_here() -> bool:
    """Whether the browser tests run (or, as root, where setup installs the browser,
    fail rather than skip when it is missing)."""
    return missing_requirement() is None or os.geteuid() == 0


def missing_requirement() -> str | None:
    """Why the browser tests cannot run here (None when they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Python Playwright is not installed: run scripts/setup.sh (requirements.txt)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: {INSTALL_HINT}"
    return None


# ---------------------------------------------------------------------- processes

@dataclass(frozen=True)
class Proc:
    """A process identified by PID *and* start time, so a reused PID is never mistaken."""

    pid: int
    start: int                  # /proc/<pid>/stat field 22, clock ticks since boot
    cmd: str

    def alive(self) -> bool:
        start = _start_time(self.pid)
        return start == self.start and not _is_zombie(self.pid)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _stat_fields(pid: int) -> list[str]:
    raw = _read(f"/proc/{pid}/stat").decode(errors="replace")
    return raw[raw.rfind(")") + 2:].split() if raw else []   # fields from 3 (state) on


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def _is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return not fields or fields[0] in ("Z", "X")


def _proc(pid: int) -> Proc | None:
    start = _start_time(pid)
    if start is None:
        return None
    cmd = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
    return Proc(pid, start, cmd)


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def processes_with_marker(marker: str) -> list[Proc]:
    """Live processes whose environment carries MARKER_VAR=marker."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    for pid in _pids():
        if needle in _read(f"/proc/{pid}/environ").split(b"\0") and not _is_zombie(pid):
            proc = _proc(pid)
            if proc is not None:
                found.append(proc)
    return found


def children_of(pid: int) -> list[Proc]:
    """Direct children of `pid`."""
    kids = []
    for child in _pids():
        fields = _stat_fields(child)
        if len(fields) > 1 and fields[1] == str(pid):
            proc = _proc(child)
            if proc is not None:
                kids.append(proc)
    return kids


def stop_process(proc: Proc, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; only if it is still the same process."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not proc.alive():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)
        deadline = time.monotonic() + wait
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)


# ---------------------------------------------------------------------- the Lab server

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """One JupyterLab on 127.0.0.1 (random port and token), in fresh temporary dirs.

    Serves the repository root, so lessons/ and tests/fixtures/ open by relative path.
    Kernels resolve to this interpreter (`sys.executable`, the project's .venv when the
    tests run as `.venv/bin/python -m pytest`): the only kernel spec is ipykernel's
    "python3" in the venv, whose argv[0] "python" Jupyter replaces by the server's own
    interpreter.
    """

    def __init__(self, marker: str, root: Path = REPO):
        self.marker, self.root = marker, root
        self.tmp = Path(tempfile.mkdtemp(prefix="minillm-lab-"))
        self.token = secrets.token_hex(24)
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.proc: Proc | None = None
        self.kernels: set[Proc] = set()
        self.log_path = self.tmp / "server.log"
        self.env = self._environment()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR",
                     "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR"):
            folder = self.tmp / name.lower()
            folder.mkdir()
            env[name] = str(folder)
        env.pop("JUPYTER_PATH", None)                   # no kernel specs from elsewhere
        env.pop("JUPYTER_TOKEN", None)
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["HF_HUB_OFFLINE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env[MARKER_VAR] = self.marker
        self._write_settings(Path(env["JUPYTERLAB_SETTINGS_DIR"]))
        self._write_server_config(Path(env["JUPYTER_CONFIG_DIR"]))
        return env

    @property
    def saves_log(self) -> Path:
        return self.tmp / "saves.log"

    def saved_paths(self) -> list[str]:
        """Paths the page tried to save (each refused; see `_write_server_config`)."""
        return _read(str(self.saves_log)).decode().split()

    def _write_server_config(self, folder: Path) -> None:
        """The server refuses every save (and logs it), and keeps checkpoints in tmp, so a
        test run never writes into the repository's notebooks or folders."""
        (folder / "jupyter_server_config.py").write_text(SERVER_CONFIG.format(
            saves=str(self.saves_log), checkpoints=str(self.tmp / "checkpoints")))

    @staticmethod
    def _write_settings(folder: Path) -> None:
        """Lab settings for tests: never save (autosave would write outputs into the
        repository's notebooks), no news / update pop-up over the widgets."""
        for plugin, values in LAB_SETTINGS.items():
            path = folder / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))

    def kernel_specs(self) -> dict:
        """`jupyter kernelspec list --json` under the server's environment."""
        out = subprocess.run([sys.executable, "-m", "jupyter", "kernelspec", "list", "--json"],
                             env=self.env, capture_output=True, text=True, timeout=60,
                             check=True)
        return json.loads(out.stdout)["kernelspecs"]

    def start(self, timeout: float = 90.0) -> None:
        for attempt in range(3):                        # a random port can be taken: retry
            self.port = _free_port()
            if self._launch(timeout):
                return
            self._stop_server_process()
        raise RuntimeError(f"JupyterLab did not start; log:\n{self.log()}")

    def _launch(self, timeout: float) -> bool:
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--LabApp.news_url=None",
               "--LabApp.expose_app_in_browser=True"]
        if os.geteuid() == 0:
            cmd.append("--ServerApp.allow_root=True")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(cmd, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.root)
        self.proc = _proc(self.process.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError, ValueError):
                self.api("GET", "/api/status", timeout=2)
                return True
            time.sleep(0.25)
        return False

    def api(self, method: str, path: str, timeout: float = 10.0, body: dict | None = None):
        """Call the server's REST API with the token; the decoded JSON answer (or None)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, method=method, data=data,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def record_kernels(self) -> set[Proc]:
        """Remember the kernels (children of the server running ipykernel) started so far."""
        if self.process is not None:
            self.kernels |= {p for p in children_of(self.process.pid) if "ipykernel" in p.cmd}
        return self.kernels

    def log(self, tail: int = 6000) -> str:
        return _read(str(self.log_path)).decode(errors="replace")[-tail:]

    def stop(self) -> None:
        """Shut the server down cleanly, then end every kernel it started, by PID."""
        self.record_kernels()
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.api("POST", "/api/shutdown", timeout=10)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
        self._stop_server_process()
        for kernel in self.kernels:          # own process groups: not ended with the server
            stop_process(kernel)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _stop_server_process(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.record_kernels()


# ---------------------------------------------------------------------- the browser

class Browser:
    """Headless Debian Chromium driven by Python Playwright (fresh profile each launch)."""

    def __init__(self, marker: str, playwright=None):
        self.marker = marker
        self.playwright = playwright             # one sync Playwright per thread: share it
        self.own_driver = playwright is None
        self.browser = None
        self.driver: set[Proc] = set()           # Playwright's node driver, if ours
        self.chromium: set[Proc] = set()

    def start(self) -> None:
        if self.own_driver:
            from playwright.sync_api import sync_playwright
            before = {p.pid for p in children_of(os.getpid())}
            self.playwright = sync_playwright().start()
            self.driver = {p for p in children_of(os.getpid()) if p.pid not in before}
        # Playwright gives a non-persistent launch a fresh, empty --user-data-dir
        self.browser = self.playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            env={**os.environ, MARKER_VAR: self.marker})
        self.chromium = set(p for p in processes_with_marker(self.marker)
                            if "chrom" in p.cmd)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if self.browser is not None:
                self.browser.close()
        with contextlib.suppress(Exception):
            if self.playwright is not None and self.own_driver:
                self.playwright.stop()
        for proc in self.chromium | self.driver:
            stop_process(proc)


@dataclass
class LabSession:
    """A running Lab server + browser; `started()` lists what it started (leak test)."""

    marker: str
    server: LabServer
    browser: Browser
    opened: int = 0
    stragglers: list[Proc] = field(default_factory=list)   # what the final sweep ended

    def started(self) -> set[Proc]:
        self.server.record_kernels()
        return ({self.server.proc} if self.server.proc else set()) | self.server.kernels \
            | self.browser.chromium | self.browser.driver


@contextlib.contextmanager
def lab_session(playwright=None):
    """Start JupyterLab + Chromium; on exit (also on an exception) stop both, by PID.

    After stopping, any process still carrying this session's marker (a kernel, a
    Chromium helper) is ended, and the exit fails loudly if one survives even that.
    `playwright`: a running sync Playwright to launch Chromium from (a thread can run
    only one); by default the session starts its own and stops it.
    """
    marker = uuid.uuid4().hex
    server, browser = LabServer(marker), Browser(marker, playwright)
    session = LabSession(marker, server, browser)
    try:
        server.start()
        browser.start()
        yield session
    finally:
        browser.stop()
        server.stop()
        session.stragglers = _sweep(marker)
        left = processes_with_marker(marker) + [p for p in browser.driver if p.alive()]
        if left:
            raise RuntimeError(f"processes left after the browser session: {left}")


def _sweep(marker: str, wait: float = 5.0) -> list[Proc]:
    """Give exiting helpers `wait` s to go, then end (by PID) any process with the marker.

    Returns what had to be ended: nothing, when the orderly stop above did its job.
    """
    deadline = time.monotonic() + wait
    while processes_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    stragglers = processes_with_marker(marker)
    for proc in stragglers:
        stop_process(proc, grace=2.0)
    return stragglers


# ---------------------------------------------------------------------- which notebooks

def _imports(source: str) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import in a code cell (magics skipped)."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


# minillm.widgets modules that hold no widget: colours, Trace layout, drawing, the base
HELPER_MODULES = ("style", "layout", "draw", "base", "markdown")


def widget_modules(notebook: Path) -> list[str]:
    """The minillm.widgets modules a notebook imports widgets from (helpers excluded).

    `from minillm.widgets.stepper import EngineStepper` and
    `import minillm.widgets.kv_map` count; `from minillm.widgets.style import COLORS`
    does not (every lesson styles its charts), nor does any other of the HELPER_MODULES
    (`layout.BlockMap` is data, `draw.draw_slot_grids` a static chart), and neither does
    an import of lowercase names only (a drawing function such as `draw_slot_grids`
    shows a static chart, not a widget).
    """
    cells = json.loads(notebook.read_text())["cells"]
    modules = set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for module, names in _imports(source):
            if module == "minillm.widgets":          # from minillm.widgets import x, Y
                modules |= {f"minillm.widgets.{n}" for n in names if n not in HELPER_MODULES}
            elif (module.startswith("minillm.widgets.")
                  and module.split(".")[2] not in HELPER_MODULES):
                if not names or any(n[:1].isupper() for n in names):
                    modules.add(module)
    return sorted(modules)


def widget_lessons(lessons: Path = LESSONS) -> list[Path]:
    """Lesson notebooks that show a minillm widget (see `widget_modules`)."""
    return [p for p in sorted(lessons.glob("*.ipynb")) if widget_modules(p)]


# ---------------------------------------------------------------------- the report

@dataclass
class Action:
    """One operation on a control and what it changed."""

    control: str                  # e.g. 'slider "slots" 8 → 9'
    readout_changed: bool = False
    plot_changed: bool = False
    seconds: float = 0.0
    kernel_errors: list[str] = field(default_factory=list)
    note: str = ""

    def __str__(self) -> str:
        changed = [w for w, c in (("numbers", self.readout_changed),
                                  ("plot", self.plot_changed)) if c]
        return (f"{self.control}: {' + '.join(changed) or 'nothing'} changed "
                f"in {self.seconds:.1f} s" + (f" ({self.note})" if self.note else ""))


@dataclass
class WidgetReport:
    index: int
    cell: int
    rendered: bool = False
    controls: dict[str, int] = field(default_factory=dict)   # kind -> how many enabled
    readout: str = ""
    actions: list[Action] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)


@dataclass
class NotebookReport:
    path: str
    widgets: list[WidgetReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)           # notebook-level
    console_errors: list[str] = field(default_factory=list)
    ignored_console: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def all_problems(self) -> list[str]:
        found = list(self.problems)
        found += [f"console error: {e}" for e in self.console_errors]
        for w in self.widgets:
            found += [f"widget {w.index} (cell {w.cell}): {p}" for p in w.problems]
        return found

    @property
    def ok(self) -> bool:
        return not self.all_problems()

    def summary(self) -> str:
        lines = [f"{self.path}: {len(self.widgets)} widget(s); "
                 + ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())]
        for w in self.widgets:
            lines.append(f"  widget {w.index} (cell {w.cell}): rendered={w.rendered} "
                         f"controls={w.controls}")
            lines += [f"    - {a}" for a in w.actions]
            lines += [f"    ! {p}" for p in w.problems]
            lines += [f"    screenshot {s.relative_to(REPO)}" for s in w.screenshots]
        lines += [f"  ! {p}" for p in self.problems]
        lines += [f"  ! console error: {e}" for e in self.console_errors]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------- in the page
# Small JavaScript helpers, evaluated in the JupyterLab page (`window.jupyterapp` exists
# because the server runs with --LabApp.expose_app_in_browser=True).

JS_INSTALL = """(path) => {
  const app = window.jupyterapp;
  const find = () => {
    for (const w of app.shell.widgets('main')) {
      if (w.context && w.context.path === path && w.sessionContext) return w;
    }
    return null;
  };
  window.__mll = window.__mll || {find, errors: [], stderr: [], hooked: false};
  const panel = find();
  if (panel && !window.__mll.hooked) {
    // every error the kernel publishes: cell errors and exceptions in widget callbacks
    // (ipywidgets reports those with showtraceback on iopub; Lab shows them in no cell)
    panel.sessionContext.iopubMessage.connect((_, msg) => {
      const type = msg.header.msg_type;
      if (type === 'error') {
        window.__mll.errors.push({ename: msg.content.ename, evalue: msg.content.evalue,
                                  parent: (msg.parent_header || {}).msg_type || ''});
      } else if (type === 'stream' && msg.content.name === 'stderr') {
        window.__mll.stderr.push(msg.content.text);
      }
    });
    window.__mll.hooked = true;
  }
  return !!panel && window.__mll.hooked;
}"""

JS_KERNEL = """() => {
  const panel = window.__mll.find();
  const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return kernel ? {name: kernel.name, status: kernel.status,
                   connection: kernel.connectionStatus, id: kernel.id} : null;
}"""

JS_RUN_STATE = """() => {
  const panel = window.__mll.find();
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const code = panel.content.widgets.filter(c => c.model.type === 'code');
  const prompt = c => (c.node.querySelector('.jp-InputPrompt') || {}).textContent || '';
  return {kernel: kernel ? kernel.status : 'none', total: code.length,
          ran: code.filter(c => c.model.executionCount !== null).length,
          queued: code.filter(c => prompt(c).includes('*')).length,
          errors: window.__mll.errors.length};
}"""

JS_CELL_PROBLEMS = """() => {
  const panel = window.__mll.find();
  const problems = [];
  panel.content.widgets.forEach((cell, i) => {
    if (cell.model.type !== 'code') return;
    if (cell.model.executionCount === null && cell.model.sharedModel.getSource().trim())
      problems.push(`cell ${i} did not run`);
    for (const out of cell.model.outputs.toJSON()) {
      if (out.output_type === 'error') problems.push(`cell ${i} raised ${out.ename}: ${out.evalue}`);
    }
  });
  return problems;
}"""

# Top-level widget outputs (not nested in another output), tagged data-mll-widget=k.
JS_FIND_WIDGETS = """() => {
  const panel = window.__mll.find();
  const cells = panel.content.widgets.map(c => c.node);
  const outputs = Array.from(panel.node.querySelectorAll('.jp-OutputArea-output'))
    .filter(o => !o.parentElement.closest('.jp-OutputArea-output'));
  const found = [];
  for (const out of outputs) {
    const root = out.querySelector(':scope > .jupyter-widgets');
    const text = out.textContent || '';
    // two ways ipywidgets shows a failed view: the text "Error displaying widget…" in
    // place of the widget, or (JavaScript view class not loadable) an error view
    const errorView = out.querySelector('.jupyter-widgets-error-widget');
    const failed = text.includes('Error displaying widget') || !!errorView;
    if (!root && !failed && !text.includes('Loading widget')) continue;
    out.setAttribute('data-mll-widget', String(found.length));
    found.push({cell: cells.indexOf(out.closest('.jp-Cell')), rendered: !!root && !failed,
                loading: text.includes('Loading widget'), errorView: !!errorView,
                message: failed ? text.trim().slice(0, 400) : ''});
  }
  return found;
}"""

# Numbers and pictures a widget shows: readout text, and a digest of each image's bytes.
JS_WIDGET_STATE = """async (k) => {
  const root = document.querySelector(`[data-mll-widget="${k}"]`);
  const readouts = Array.from(root.querySelectorAll(
      '.widget-html-content, .widget-htmlmath-content, .jupyter-widgets.widget-label'))
    .map(e => e.textContent.trim());
  const images = [];
  for (const img of root.querySelectorAll('img')) {
    let digest = '';
    if (img.src) {
      const bytes = await (await fetch(img.src)).arrayBuffer();
      const hash = await crypto.subtle.digest('SHA-256', bytes);
      digest = Array.from(new Uint8Array(hash).slice(0, 12))
        .map(b => b.toString(16).padStart(2, '0')).join('');
    }
    images.push({digest, loaded: img.complete && img.naturalWidth > 0,
                 width: img.naturalWidth, height: img.naturalHeight});
  }
  const panel = window.__mll.find();
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return {readout: readouts.join(' | '), images, kernel: kernel ? kernel.status : 'none',
          errors: window.__mll.errors.length,
          failed: (root.textContent || '').includes('Error displaying widget') ||
                  !!root.querySelector('.jupyter-widgets-error-widget')};
}"""

# The controls a learner can operate, in page order; each tagged data-mll-control=j.
JS_CONTROLS = """(k) => {
  const root = document.querySelector(`[data-mll-widget="${k}"]`);
  const label = e => ((e.querySelector('.widget-label') || {}).textContent || '').trim();
  const controls = [];
  const add = (el, kind, extra) => {
    el.setAttribute('data-mll-control', String(controls.length));
    controls.push({index: controls.length, kind, ...extra});
  };
  for (const s of root.querySelectorAll('.widget-slider')) {
    const bar = s.querySelector('.noUi-target');
    add(s, 'slider', {label: label(s), disabled: !bar || bar.hasAttribute('disabled'),
                      value: ((s.querySelector('.widget-readout') || {}).textContent || '').trim()});
  }
  for (const d of root.querySelectorAll('.widget-dropdown')) {
    const sel = d.querySelector('select');
    add(d, 'dropdown', {label: label(d), disabled: !sel || sel.disabled,
                        value: sel ? sel.value : '',
                        options: sel ? Array.from(sel.options).filter(o => !o.disabled)
                                         .map(o => o.value) : []});
  }
  for (const p of root.querySelectorAll('.widget-play')) {
    const b = p.querySelector('button');
    add(p, 'play', {label: 'play', disabled: !b || b.disabled});
  }
  for (const b of root.querySelectorAll('button.widget-button, button.widget-toggle-button')) {
    add(b, 'button', {label: (b.textContent || b.title || '').trim(), disabled: b.disabled});
  }
  return controls;
}"""


# ---------------------------------------------------------------------- the check

# Console messages of type "error" that are not a widget's fault. Each entry is
# (regular expression, why it is harmless). Everything else fails the check.
BENIGN_CONSOLE: list[tuple[str, str]] = []

VIEWPORT = {"width": 1400, "height": 1400}
# hidden while taking a widget's screenshot: Lab's status bar overlaps tall widgets
SCREENSHOT_CSS = "#jp-main-statusbar { visibility: hidden !important; }"


class _Clock:
    def __init__(self):
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start


def check_notebook(session: LabSession, notebook: Path, *, run_timeout: float = 600.0,
                   change_timeout: float = 60.0, artifacts: Path = ARTIFACTS) -> NotebookReport:
    """Open `notebook` in JupyterLab, Run All, and exercise every widget (see module doc).

    Never raises for a problem of the notebook: every problem is listed in the report.
    """
    notebook = notebook.resolve()
    rel = notebook.relative_to(session.server.root).as_posix()
    report = NotebookReport(rel)
    stem = notebook.stem
    artifacts.mkdir(parents=True, exist_ok=True)
    session.opened += 1
    context = session.browser.browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.on("console", lambda m: _on_console(report, m))
    page.on("pageerror", lambda e: report.console_errors.append(f"page error: {e}"))
    clock = _Clock()
    try:
        _open(page, session, rel, report, clock)
        _run_all(page, report, clock, run_timeout)
        report.problems += page.evaluate(JS_CELL_PROBLEMS)
        widgets = _find_widgets(page)
        if not widgets:
            report.notes.append("no widget on the page")
        for k, found in enumerate(widgets):
            report.widgets.append(_check_widget(page, k, found, stem, artifacts,
                                                change_timeout))
        report.seconds["widgets"] = clock() - sum(report.seconds.values())
    except Exception as error:                       # timeouts, a closed page, …
        report.problems.append(f"{type(error).__name__}: {str(error).splitlines()[0]}")
        with contextlib.suppress(Exception):
            shot = artifacts / f"{stem}-page-on-failure.png"
            page.screenshot(path=str(shot), full_page=False)
            report.notes.append(f"page screenshot: {shot.relative_to(REPO)}")
    finally:
        _close(page, context, session, rel)
    if rel in session.server.saved_paths():
        report.problems.append(f"the page tried to save {rel} (refused)")
    return report


def _on_console(report: NotebookReport, message) -> None:
    if message.type != "error":
        return
    text = message.text.splitlines()[0] if message.text else ""   # no stack trace
    location = message.location or {}
    if location.get("url"):
        text += f"  [{location['url']}:{location.get('lineNumber')}]"
    for pattern, _why in BENIGN_CONSOLE:
        if re.search(pattern, text):
            report.ignored_console.append(text)
            return
    report.console_errors.append(text)


def _open(page, session: LabSession, rel: str, report: NotebookReport, clock) -> None:
    """Load Lab on the notebook (its own workspace) and wait for a connected idle kernel."""
    workspace = f"test{session.opened}"
    page.goto(f"{session.server.url}/lab/workspaces/{workspace}/tree/{rel}"
              f"?token={session.server.token}")
    page.wait_for_function("(p) => window.jupyterapp && window.jupyterapp.shell && "
                           "Array.from(window.jupyterapp.shell.widgets('main'))"
                           ".some(w => w.context && w.context.path === p && w.sessionContext)",
                           arg=rel, timeout=120_000)
    page.evaluate(JS_INSTALL, rel)
    deadline = time.monotonic() + 120
    while True:
        kernel = page.evaluate(JS_KERNEL)
        if kernel and kernel["connection"] == "connected" and kernel["status"] == "idle":
            break
        _accept_kernel_dialog(page)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no idle kernel after 120 s (last: {kernel})")
        time.sleep(0.2)
    if kernel["name"] != "python3":
        report.problems.append(f"kernel is {kernel['name']!r}, expected 'python3'")
    for proc in session.server.record_kernels():
        python = proc.cmd.split(" ")[0]          # not resolved: a venv's python is a symlink
        if python != sys.executable:
            report.problems.append(f"kernel runs {python}, not {sys.executable}")
    report.seconds["open"] = clock()


def _accept_kernel_dialog(page) -> None:
    """The 'Select Kernel' race (see module doc): take the default, Python 3."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count() and "kernel" in (dialog.first.text_content() or "").lower():
        with contextlib.suppress(Exception):
            dialog.locator(".jp-mod-accept").first.click(timeout=2000)


def _run_all(page, report: NotebookReport, clock, timeout: float) -> None:
    """Run ▸ Run All Cells from the menu bar, then wait until nothing is queued or busy."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    start = clock()
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 3:                               # three calm polls in a row: finished
        _accept_kernel_dialog(page)
        state = page.evaluate(JS_RUN_STATE)
        calm = state["kernel"] == "idle" and state["queued"] == 0 and state["ran"] > 0
        quiet = quiet + 1 if calm else 0
        if time.monotonic() > deadline:
            raise TimeoutError(f"Run All did not finish in {timeout:.0f} s ({state})")
        time.sleep(0.4)
    report.seconds["run all"] = clock() - start


def _find_widgets(page) -> list[dict]:
    """Widget outputs, once no widget is still loading (up to 30 s)."""
    deadline = time.monotonic() + 30
    found = page.evaluate(JS_FIND_WIDGETS)
    while any(w["loading"] for w in found) and time.monotonic() < deadline:
        time.sleep(0.3)
        found = page.evaluate(JS_FIND_WIDGETS)
    return found


def _close(page, context, session: LabSession, rel: str) -> None:
    """Shut this notebook's kernel down (REST), remember its PID, close the page."""
    session.server.record_kernels()
    with contextlib.suppress(Exception):
        for s in session.server.api("GET", "/api/sessions"):
            if s.get("path") == rel:
                session.server.api("DELETE", f"/api/sessions/{s['id']}", timeout=30)
    with contextlib.suppress(Exception):
        context.close()


# ---------------------------------------------------------------------- one widget

def _check_widget(page, k: int, found: dict, stem: str, artifacts: Path,
                  change_timeout: float) -> WidgetReport:
    """Rendered? Then operate its main controls and check numbers and plot follow."""
    w = WidgetReport(index=k, cell=found["cell"], rendered=found["rendered"])
    root = page.locator(f'[data-mll-widget="{k}"]')
    root.scroll_into_view_if_needed()
    if not found["rendered"]:
        message = found["message"]
        if found["errorView"]:                     # the error view shows its text on click
            with contextlib.suppress(Exception):
                root.locator(".jupyter-widgets-error-widget").first.click(timeout=5000)
                message = " ".join((root.text_content() or "").split())
            message = f"Error displaying widget (JavaScript error view): {message[:300]}"
        w.problems.append(f"did not render: {message or 'no widget view'}")
        w.screenshots.append(_screenshot(root, artifacts / f"{stem}-w{k}-failed.png"))
        return w
    state = _wait_for_images(page, k)
    w.readout = state["readout"]
    if any(not im["loaded"] for im in state["images"]):
        w.problems.append("an image did not load (broken PNG?)")
    w.screenshots.append(_screenshot(root, artifacts / f"{stem}-w{k}-1-initial.png"))
    controls = [c for c in page.evaluate(JS_CONTROLS, k) if not c["disabled"]]
    for kind in ("slider", "dropdown", "play", "button"):
        count = sum(c["kind"] == kind for c in controls)
        if count:
            w.controls[kind] = count
    if not controls:
        return w                             # a picture with numbers, nothing to operate
    if not state["readout"] and not state["images"]:
        w.problems.append("has controls but shows neither numbers (HTML/Label) nor a plot")
    main = [next((c for c in controls if c["kind"] == kind), None)
            for kind in ("slider", "dropdown", "play")]
    for control in [c for c in main if c] + [c for c in controls if c["kind"] == "button"]:
        action, state = _operate(page, k, control, state, change_timeout)
        w.actions.append(action)
        w.problems += _judge(action, control, state)
    buttons = [a for a, c in zip(w.actions, [c for c in main if c] +
                                 [c for c in controls if c["kind"] == "button"])
               if c["kind"] == "button"]
    if buttons and not any(a.readout_changed or a.plot_changed for a in buttons):
        w.problems.append("no button changed the numbers or the plot")
    root.scroll_into_view_if_needed()
    w.screenshots.append(_screenshot(root, artifacts / f"{stem}-w{k}-2-after.png"))
    return w


def _judge(action: Action, control: dict, state: dict) -> list[str]:
    problems = [f"{action.control} raised {e}" for e in action.kernel_errors]
    if state.get("failed"):
        problems.append(f"after {action.control}: 'Error displaying widget'")
    if control["kind"] == "button":          # a button may rightly do nothing (Back at 0)
        return problems
    if action.note.startswith("did not move"):
        problems.append(f"{action.control}: {action.note}")
    if state["readout"] or action.readout_changed:
        if not action.readout_changed:
            problems.append(f"numbers did not change after {action.control}")
    if state["images"] and not action.plot_changed:
        problems.append(f"plot did not change after {action.control}")
    return problems


def _screenshot(locator, path: Path) -> Path:
    with contextlib.suppress(Exception):
        locator.screenshot(path=str(path), animations="disabled", style=SCREENSHOT_CSS,
                           timeout=15_000)
    return path


def _state(page, k: int) -> dict:
    return page.evaluate(JS_WIDGET_STATE, k)


def _wait_for_images(page, k: int, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    state = _state(page, k)
    while any(not im["loaded"] for im in state["images"]) and time.monotonic() < deadline:
        time.sleep(0.2)
        state = _state(page, k)
    return state


def _digests(state: dict) -> list[str]:
    return [im["digest"] for im in state["images"]]


def _operate(page, k: int, control: dict, before: dict, timeout: float) -> tuple[Action, dict]:
    """Operate one control as a learner would; wait for the display to settle."""
    el = page.locator(f'[data-mll-widget="{k}"] [data-mll-control="{control["index"]}"]')
    el.scroll_into_view_if_needed()
    start = time.monotonic()
    action = Action(f'{control["kind"]} "{control["label"]}"')
    if control["kind"] == "slider":
        handle = el.locator(".noUi-handle").first
        readout = el.locator(".widget-readout").first
        old = control["value"]
        for key in ("ArrowRight", "ArrowLeft"):      # at its maximum, move it down instead
            handle.focus()
            handle.press(key)
            new = _wait_text_change(readout, old, 3.0)
            if new != old:
                break
        action.control += f" {old} → {new} (keyboard)"
        if new == old:
            action.note = "did not move with the keyboard"
        state = _wait_for_change(page, k, before, timeout)
    elif control["kind"] == "dropdown":
        options = control["options"]
        old = control["value"]
        new = options[(options.index(old) + 1) % len(options)] if old in options else options[0]
        el.locator("select").select_option(value=new)
        action.control += f" {old} → {new}"
        state = _wait_for_change(page, k, before, timeout)
    elif control["kind"] == "play":
        toggle = el.locator("button").first
        toggle.click()
        state = _wait_for_change(page, k, before, timeout, settle=False)
        toggle.click()                                 # pause
        action.control += " ▶ then ⏸"
        state = _settle(page, k)
    else:
        el.click()
        action.control += " (click)"
        state = _wait_for_change(page, k, before, timeout)
    action.seconds = time.monotonic() - start
    action.readout_changed = state["readout"] != before["readout"]
    action.plot_changed = _digests(state) != _digests(before)
    errors = page.evaluate("(n) => window.__mll.errors.slice(n)", before["errors"])
    action.kernel_errors = [f"{e['ename']}: {e['evalue']}" for e in errors]
    return action, state


def _wait_text_change(locator, old: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = (locator.text_content() or "").strip()
        if text != old or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


def _wait_for_change(page, k: int, before: dict, timeout: float, settle: bool = True,
                     min_wait: float = 2.5, idle_for: float = 1.5) -> dict:
    """Until numbers and plot both changed (then settle), or the kernel stayed idle with
    nothing changing for `idle_for` s (after at least `min_wait` s), or `timeout`."""
    start = time.monotonic()
    calm_since, last = None, None
    while True:
        state = _state(page, k)
        both = (state["readout"] != before["readout"] or not before["readout"]) and \
            (_digests(state) != _digests(before) or not before["images"])
        if both:
            return _settle(page, k) if settle else state
        now = time.monotonic()
        key = (state["readout"], tuple(_digests(state)), state["errors"])
        calm_since = (calm_since or now) if state["kernel"] == "idle" and key == last else None
        last = key
        if state["errors"] > before["errors"] and state["kernel"] == "idle":
            return state
        if now - start > min_wait and calm_since is not None and now - calm_since > idle_for:
            return state
        if now - start > timeout:
            return state
        time.sleep(0.2)


def _settle(page, k: int, timeout: float = 30.0) -> dict:
    """Until the kernel is idle and the widget looks the same twice, 0.5 s apart."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        state = _state(page, k)
        key = (state["readout"], tuple(_digests(state)), state["errors"])
        if state["kernel"] == "idle" and key == last or time.monotonic() > deadline:
            return state
        last = key
        time.sleep(0.5)
