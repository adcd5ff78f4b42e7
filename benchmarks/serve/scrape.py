"""Read a server's `/metrics` page (Prometheus text) back into numbers.

    snap = scrape("http://127.0.0.1:8000")
    snap.value("minillm:num_requests_running")          # summed over label sets
    snap.quantile("minillm:time_to_first_token_seconds", 0.99)

A histogram only stores how many observations fell at or below each bucket edge
(`_bucket{le="0.5"} 17`), so a percentile read back from it is an estimate: find the
bucket the q-th observation falls in, and interpolate linearly inside it — what
Prometheus' `histogram_quantile()` does. It is only as fine as the bucket edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Snapshot:
    values: dict[str, float] = field(default_factory=dict)     # sample name → sum
    buckets: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def value(self, name: str, default: float = 0.0) -> float:
        return self.values.get(name, default)

    def quantile(self, histogram: str, q: float) -> float | None:
        """Estimated q-quantile (0 < q < 1) of a histogram; None if it is empty."""
        return histogram_quantile(self.buckets.get(histogram, []), q)

    def since(self, earlier: "Snapshot") -> "Snapshot":
        """What happened between two scrapes: counters and buckets minus the earlier ones
        (gauges come out as differences too — read those from `self`)."""
        values = {k: v - earlier.values.get(k, 0.0) for k, v in self.values.items()}
        buckets = {}
        for name, edges in self.buckets.items():
            before = dict(earlier.buckets.get(name, []))
            buckets[name] = [(edge, count - before.get(edge, 0.0)) for edge, count in edges]
        return Snapshot(values, buckets)


def parse(text: str) -> Snapshot:
    snap = Snapshot()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            snap.values[sample.name] = snap.values.get(sample.name, 0.0) + sample.value
            if sample.name.endswith("_bucket"):
                edges = snap.buckets.setdefault(family.name, [])
                edges.append((float(sample.labels["le"]), sample.value))
    for edges in snap.buckets.values():
        edges.sort()
    return snap


def scrape(base_url: str, timeout: float = 5.0) -> Snapshot:
    return parse(httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout).text)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """`buckets`: (upper edge, cumulative count), sorted, the last edge +Inf."""
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    lower_edge, lower_count = 0.0, 0.0
    for edge, count in buckets:
        if count >= rank:
            if math.isinf(edge):                 # beyond the last finite edge: say so
                return lower_edge
            inside = (rank - lower_count) / (count - lower_count) if count > lower_count else 1
            return lower_edge + (edge - lower_edge) * inside
        lower_edge, lower_count = edge, count
    return lower_edge
