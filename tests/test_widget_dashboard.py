"""The serving dashboard on a scripted /metrics source: each poll redraws numbers and plot,
tokens/s is the counter's rate, the send button starts a burst and live polling."""

from __future__ import annotations

import threading
import time

import pytest

from benchmarks.serve.scrape import histogram_quantile, parse
from minillm.widgets.dashboard import Sample, ServerDashboard

pytestmark = pytest.mark.unit


def metrics_text(running, waiting, kv, generated):
    return (f'minillm:num_requests_running{{model_name="m"}} {running}\n'
            f'minillm:num_requests_waiting{{model_name="m"}} {waiting}\n'
            f'minillm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
            "# TYPE minillm:generation_tokens counter\n"
            f'minillm:generation_tokens_total{{model_name="m"}} {generated}\n')


class ScriptedServer:
    def __init__(self, states):
        self.states, self.calls = list(states), 0

    def fetch(self):
        state = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        return parse(metrics_text(*state))


def test_each_poll_redraws_and_tokens_per_second_is_the_counters_rate():
    server = ScriptedServer([(0, 0, 0.0, 0), (3, 2, 0.25, 40), (0, 0, 0.0, 40)])
    dash = ServerDashboard("http://test", fetch=server.fetch)
    first_png, first_text = dash.plot.value, dash.readout.value
    time.sleep(0.2)
    dash.poll()
    r = dash.result
    assert (r["running"], r["waiting"], r["kv_usage"]) == (3, 2, 0.25)
    assert r["tokens_per_s"] == pytest.approx(40 / (dash.samples[1].t - dash.samples[0].t))
    assert dash.plot.value != first_png and dash.readout.value != first_text
    assert "running <b>3</b>" in dash.readout.value and "25.0%" in dash.readout.value
    dash.poll()
    assert dash.result["tokens_per_s"] == 0 and dash.result["peak_running"] == 3


def test_send_starts_a_burst_and_live_polling_that_stops_when_idle():
    sent = []
    server = ScriptedServer([(0, 0, 0.0, 0), (8, 0, 0.5, 10), (8, 0, 0.5, 50), (0, 0, 0.0, 90)])
    done = threading.Event()

    def burst(n):
        sent.append(n)
        done.wait(5)

    dash = ServerDashboard("http://test", interval=0.05, idle_stop=0.2, fetch=server.fetch,
                           send_burst=burst)
    dash.send.click()
    assert dash.live.value and sent == [8]
    done.set()
    deadline = time.monotonic() + 10
    while dash.live.value and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not dash.live.value, "live polling should stop once the server is idle"
    assert dash.result["peak_running"] == 8 and dash.result["generated_tokens"] == 90


def test_an_unreachable_server_is_reported_not_raised():
    def fail():
        raise ConnectionError("refused")
    dash = ServerDashboard("http://nowhere", fetch=fail)
    assert "cannot read http://nowhere/metrics" in dash.readout.value


def test_histogram_quantiles_interpolate_inside_a_bucket():
    buckets = [(0.1, 0.0), (0.2, 50.0), (0.4, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(buckets, 0.5) == pytest.approx(0.2)
    assert histogram_quantile(buckets, 0.75) == pytest.approx(0.3)
    assert histogram_quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.5) is None


def test_a_pause_in_polling_breaks_the_lines_and_old_samples_leave_the_window():
    server = ScriptedServer([(0, 0, 0.0, 0)])
    dash = ServerDashboard("http://test", interval=0.5, window=60, fetch=server.fetch)
    dash.samples = [Sample(t, 1, 0, 0.1, 5.0) for t in (0, 0.5, 1.0, 30, 30.5, 100)]
    t, series = dash._recent_series()
    assert t == [100]                           # samples before 100 - 60 s are gone
    dash.samples = dash.samples[:5]
    t, series = dash._recent_series()
    assert t == [0, 0.5, 1.0, 1.5, 30, 30.5]    # one NaN point between 1.0 and 30
    assert series["running"][3] != series["running"][3]     # NaN
