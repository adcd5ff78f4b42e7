"""A live dashboard of a running server, drawn from its `/metrics` page.

    dash = ServerDashboard(server.base_url)
    dash.widget                       # display it; press "live", or call dash.start()
    ... send load ...
    dash.stop(); dash.result          # the numbers on screen (peak running, tokens/s, ...)

What a serving engineer watches: how many requests run and wait (the batch, the
queue), how full the KV cache is, and how many tokens per second come out. Each poll
reads the Prometheus text once; tokens/s is the change of the `generation_tokens`
counter between two polls divided by the time between them (what PromQL's `rate()`
does). Polling runs in a background thread, so the plot moves while a notebook cell
is busy sending load. "live" stops by itself once the server has been idle for a few
seconds; "send 8 requests" starts a small burst from this kernel (in another thread).
"""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass

import ipywidgets as widgets

from minillm.widgets.style import COLORS

BURST_PROMPT = "Write a long story about a lighthouse keeper and a storm."


@dataclass
class Sample:
    t: float                 # seconds since the dashboard started
    running: float
    waiting: float
    kv_usage: float          # 0..1
    tokens_per_s: float


class ServerDashboard:
    def __init__(self, base_url: str, interval: float = 0.5, idle_stop: float = 4.0,
                 window: float = 90.0, fetch=None, send_burst=None):
        from benchmarks.serve.scrape import scrape
        self.base_url = base_url
        self.interval, self.idle_stop, self.window = interval, idle_stop, window
        self._fetch = fetch or (lambda: scrape(base_url))
        self._send_burst = send_burst or self._default_burst
        self.samples: list[Sample] = []
        self.result: dict = {}
        self._t0 = time.perf_counter()
        self._last = None                     # (time, generation tokens) of the last poll
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._polling = threading.Event()
        self._loads: list[threading.Thread] = []
        self.live = widgets.ToggleButton(value=False, description="live", icon="refresh",
                                         tooltip="poll /metrics every interval")
        self.send = widgets.Button(description="send 8 requests", icon="paper-plane")
        self.readout = widgets.HTML()
        self.plot = widgets.Image(format="png")
        self.live.observe(self._on_live, "value")
        self.send.on_click(lambda _: self.burst())
        self.widget = widgets.VBox([widgets.HBox([self.live, self.send]), self.readout,
                                    self.plot])
        self.poll()

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

    # ------------------------------------------------------------ polling
    def poll(self) -> Sample | None:
        """Read /metrics once, record a sample, redraw."""
        with self._lock:
            try:
                snap = self._fetch()
            except Exception as error:            # server gone: say so, keep the widget
                self.readout.value = f"<b>cannot read {self.base_url}/metrics</b>: {error}"
                return None
            now = time.perf_counter() - self._t0
            generated = snap.value("minillm:generation_tokens_total")
            rate = 0.0
            if self._last is not None and now > self._last[0]:
                rate = (generated - self._last[1]) / (now - self._last[0])
            self._last = (now, generated)
            sample = Sample(now, snap.value("minillm:num_requests_running"),
                            snap.value("minillm:num_requests_waiting"),
                            snap.value("minillm:kv_cache_usage_perc"), rate)
            self.samples.append(sample)
            self._update(sample, generated)
            return sample

    def start(self) -> None:
        """Poll in the background until `stop()`, or until the server idles `idle_stop` s."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._polling.set()
        self._thread = threading.Thread(target=self._run, daemon=True, name="dashboard")
        self._thread.start()
        self.live.value = True

    def stop(self) -> None:
        """Stop polling (and wait for a burst this dashboard sent to finish)."""
        for load in self._loads:
            load.join(timeout=600)
        self._polling.clear()
        self.live.value = False
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _on_live(self, change) -> None:
        if change["new"]:
            self.start()
        else:
            self._polling.clear()

    def _run(self) -> None:
        idle_since = None
        while self._polling.is_set():
            sample = self.poll()
            busy = sample is None or sample.running or sample.waiting or \
                any(t.is_alive() for t in self._loads)
            idle_since = None if busy else (idle_since or time.perf_counter())
            if idle_since is not None and time.perf_counter() - idle_since > self.idle_stop:
                self._polling.clear()
                self.live.value = False
            time.sleep(self.interval)

    # ------------------------------------------------------------ load
    def burst(self, n: int = 8) -> None:
        """Send `n` streamed requests at once (in a thread) and watch them."""
        load = threading.Thread(target=self._send_burst, args=(n,), daemon=True)
        self._loads = [t for t in self._loads if t.is_alive()] + [load]
        load.start()
        self.start()

    def _default_burst(self, n: int) -> None:
        import asyncio

        from benchmarks.serve.load import run_load
        body = {"prompt": BURST_PROMPT, "max_tokens": 48, "temperature": 0.0,
                "ignore_eos": True, "stream": True}
        asyncio.run(run_load(self.base_url, [body] * n, [0.0] * n, run_timeout=300))

    # ------------------------------------------------------------ display
    def _update(self, sample: Sample, generated: float) -> None:
        peak = max(self.samples, key=lambda s: s.tokens_per_s)
        self.result = {"running": sample.running, "waiting": sample.waiting,
                       "kv_usage": sample.kv_usage, "tokens_per_s": sample.tokens_per_s,
                       "generated_tokens": generated, "num_samples": len(self.samples),
                       "peak_running": max(s.running for s in self.samples),
                       "peak_waiting": max(s.waiting for s in self.samples),
                       "peak_kv_usage": max(s.kv_usage for s in self.samples),
                       "peak_tokens_per_s": peak.tokens_per_s}
        r = self.result
        self.readout.value = (
            f"running <b>{r['running']:.0f}</b> · waiting <b>{r['waiting']:.0f}</b> · "
            f"KV cache <b>{100 * r['kv_usage']:.1f}%</b> · <b>{r['tokens_per_s']:.1f}</b> "
            f"tokens/s (peak {r['peak_tokens_per_s']:.1f}) · {r['generated_tokens']:.0f} "
            f"tokens generated · {r['num_samples']} polls")
        self.plot.value = self._draw()

    def _recent_series(self):
        """The last `window` seconds of samples; a pause in polling breaks the lines
        (NaN) instead of drawing a straight line across time nobody measured."""
        last = self.samples[-1].t
        recent = [s for s in self.samples if s.t >= last - self.window]
        names = ("running", "waiting", "kv_usage", "tokens_per_s")
        t, series = [], {name: [] for name in names}
        for previous, sample in zip([None] + recent[:-1], recent):
            if previous is not None and sample.t - previous.t > 4 * self.interval:
                t.append(previous.t + self.interval)
                for name in names:
                    series[name].append(float("nan"))
            t.append(sample.t)
            for name in names:
                series[name].append(getattr(sample, name))
        return t, series

    def _draw(self) -> bytes:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        fig = Figure(figsize=(9, 2.4), dpi=90)
        FigureCanvasAgg(fig)                  # thread-safe: no pyplot state involved
        axes = fig.subplots(1, 3)
        t, series = self._recent_series()
        axes[0].step(t, series["running"], where="post", color=COLORS["decode"], label="running")
        axes[0].step(t, series["waiting"], where="post", color=COLORS["waiting"], label="waiting")
        axes[0].legend(loc="upper left", fontsize=7)
        axes[1].plot(t, [100 * u for u in series["kv_usage"]], color=COLORS["prefill"])
        axes[2].plot(t, series["tokens_per_s"], color=COLORS["decode"])
        for ax, title in zip(axes, ("requests", "KV cache used (%)", "generated tokens/s")):
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("seconds", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.set_ylim(bottom=0)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
