"""Length distributions: how many tokens a prompt or an answer has.

Real serving traffic is uneven — most chat answers are short, a few are very long — and
that unevenness is what separates the batching strategies. A `LengthDist` names the
shape (fixed, uniform, lognormal, capped exponential, Pareto) and draws integer token
counts from it with a numpy generator; `minillm.sim.workload` combines two of them (prompt,
output) with an arrival process into a workload.
"""

from __future__ import annotations

import numpy as np

from minillm.engine.checks import check_int, check_number


# kind -> the parameters it needs (besides `cap`, which every kind has)
_KIND_PARAMS = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("median", "sigma"),
                "exponential": ("mean",), "pareto": ("minimum", "alpha")}


class LengthDist:
    """A distribution of token counts: integers in [1, cap].

    `LengthDist("lognormal", median=100, sigma=1.0, cap=2048)` — the parameters by kind:

    * fixed(value): always `value` (cap defaults to value);
    * uniform(low, high): every integer in [low, high] equally likely (cap = high);
    * lognormal(median, sigma, cap): exp(N(ln median, sigma²)); the mean is
      median · exp(sigma²/2), so sigma = 1 already puts the mean 65% above the median
      — the long right tail real chat lengths have;
    * exponential(mean, cap): memoryless, many short and a few long;
    * pareto(minimum, alpha, cap): power-law tail P(X > x) = (minimum/x)^alpha; the
      smaller alpha, the heavier the tail (alpha <= 1: the uncapped mean is infinite,
      which is why every distribution here has a cap).

    Continuous draws are rounded to the nearest integer, then clipped to [1, cap].
    """

    def __init__(self, kind: str, **params):
        if kind not in _KIND_PARAMS:
            raise ValueError(f"kind must be one of {tuple(_KIND_PARAMS)}, got {kind!r}")
        if kind == "fixed":
            params.setdefault("cap", params.get("value"))
        if kind == "uniform":
            params.setdefault("cap", params.get("high"))
        expected = set(_KIND_PARAMS[kind]) | {"cap"}
        if set(params) != expected:
            raise ValueError(f"LengthDist({kind!r}) takes exactly {sorted(expected)}, "
                             f"got {sorted(params)}")
        self.kind = kind
        self.params = params
        self._validate()

    @property
    def cap(self) -> int:
        return self.params["cap"]

    def _validate(self) -> None:
        """Token counts (cap, fixed's value, uniform's bounds) are ints >= 1; the shape
        parameters are finite numbers, > 0 (sigma: >= 0)."""
        p, kind = self.params, self.kind
        counts = {"cap"} | ({"value"} if kind == "fixed" else set()) | (
            {"low", "high"} if kind == "uniform" else set())
        for name in _KIND_PARAMS[kind] + ("cap",):
            label = f"{kind}: {name}"
            if name in counts:
                p[name] = check_int(label, p[name], minimum=1, hint="a token count")
            else:
                p[name] = check_number(label, p[name], minimum=0, above=name != "sigma")
        if kind == "uniform" and p["low"] > p["high"]:
            raise ValueError(f"uniform: low ({p['low']}) must be <= high ({p['high']})")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` lengths as an int64 array [n], each in [1, cap]."""
        p = self.params
        if self.kind == "fixed":
            raw = np.full(n, float(p["value"]))
        elif self.kind == "uniform":
            raw = rng.integers(p["low"], p["high"], size=n, endpoint=True).astype(float)
        elif self.kind == "lognormal":
            raw = rng.lognormal(np.log(p["median"]), p["sigma"], size=n)
        elif self.kind == "exponential":
            raw = rng.exponential(p["mean"], size=n)
        else:  # pareto: numpy draws the Lomax form, shifted and scaled to start at minimum
            raw = p["minimum"] * (1.0 + rng.pareto(p["alpha"], size=n))
        return np.clip(np.rint(raw), 1, p["cap"]).astype(np.int64)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"LengthDist({self.kind!r}, {args})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, LengthDist):
            return NotImplemented
        return (self.kind, self.params) == (other.kind, other.params)


def fixed(value: int) -> LengthDist:
    return LengthDist("fixed", value=value)


def uniform(low: int, high: int) -> LengthDist:
    return LengthDist("uniform", low=low, high=high)


def lognormal(median: float, sigma: float, cap: int) -> LengthDist:
    return LengthDist("lognormal", median=median, sigma=sigma, cap=cap)


def exponential(mean: float, cap: int) -> LengthDist:
    return LengthDist("exponential", mean=mean, cap=cap)


def pareto(minimum: float, alpha: float, cap: int) -> LengthDist:
    return LengthDist("pareto", minimum=minimum, alpha=alpha, cap=cap)
