"""Seeded workloads: who asks for how many tokens, and when.

A benchmark is only as honest as its workload. Serving systems differ most on
*uneven* work: a batch of equal requests makes static batching look as good as
continuous batching, while a realistic mix of short and very long answers shows an
order-of-magnitude gap. So every experiment in the course draws its requests from an
explicit, seeded length distribution and arrival process defined here.

A request is described by a `RequestSpec`:

    prompt_len   tokens in the prompt (the prefill work)
    output_len   how many tokens the model *will* generate before it emits EOS —
                 the engine does not know this in advance, the workload does
    max_tokens   the cap the client sends (`SamplingParams.max_tokens`, >= output_len);
                 a contiguous (static) reservation must hold prompt + max_tokens, so
                 the gap max_tokens − output_len is memory reserved for nothing
    arrival_time seconds since the start of the run
    priority     lower value = served first under the "priority" policy

Lengths come from a `LengthDist` (in `minillm/sim/length_dist.py`) — fixed, uniform,
lognormal, capped exponential or Pareto — always rounded to integers in [1, cap].
Arrivals are a "burst" (everyone at t = 0, the offline / batch-job case) or "poisson"
(independent exponential gaps at `rate` requests per second, the usual model of many
independent users).

Everything is drawn from numpy's `default_rng`, one independent stream per quantity
(prompt lengths, output lengths, arrival gaps, priorities), so the same seed always
gives the same workload, and changing, say, the output distribution leaves the prompt
lengths and arrival times exactly as they were.

The course's scenarios live here once, for lessons, widgets and `benchmarks/` (`SCENARIOS`):
`seed_example` (8 slots, one straggler), `stutter_workload` (streams interrupted by long
prompts) and `chat_burst` (chat answers under one generous `max_tokens` cap).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from minillm.engine.checks import check_choice, check_int, check_int_list, check_number
from minillm.sim.length_dist import (LengthDist, exponential, fixed, lognormal, pareto,  # noqa: F401
                                     uniform)

ARRIVALS = ("burst", "poisson")


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload (see the module docstring for each field)."""

    request_id: str
    prompt_len: int
    output_len: int
    max_tokens: int
    arrival_time: float = 0.0
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise TypeError(f"request_id must be a non-empty str, got {self.request_id!r}")
        checked = {name: check_int(name, getattr(self, name), minimum=1)
                   for name in ("prompt_len", "output_len", "max_tokens")}
        checked["arrival_time"] = check_number("arrival_time", self.arrival_time, minimum=0,
                                               hint="seconds since the start of the run")
        checked["priority"] = check_int("priority", self.priority)
        for name, value in checked.items():          # numpy scalars stored as plain numbers
            object.__setattr__(self, name, value)
        if self.max_tokens < self.output_len:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be >= output_len "
                             f"({self.output_len}): the cap cannot cut the answer short "
                             "here; clip output_len instead")



def arrival_times(rng: np.random.Generator, n: int, arrival: str, rate: float | None) -> np.ndarray:
    """Arrival times [n] in seconds, non-decreasing, the first at t = 0.

    "poisson": gaps between consecutive requests are independent Exponential(1/rate)
    draws — the arrival pattern of many users who do not coordinate.
    """
    if check_choice("arrival", arrival, ARRIVALS) == "burst":
        return np.zeros(n)
    if rate is None:
        raise ValueError("arrival='poisson' needs rate= (requests per second, > 0)")
    rate = check_number("rate", rate, minimum=0, above=True, hint="requests per second")
    gaps = rng.exponential(1.0 / rate, size=n)                     # [n]
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else gaps


def _resolve_max_tokens(max_tokens, output_lens: np.ndarray, output_dist: LengthDist):
    """Apply the client's cap: returns (output_lens, max_tokens), both int arrays [n].

    None         → every client sends the output distribution's cap (the usual
                   "max_tokens=1024 just in case"): realistic reservation waste;
    int          → every client sends this value; answers longer than it are cut;
    "output_len" → each client magically knows its answer's length: no waste.
    """
    if max_tokens is None:
        caps = np.full_like(output_lens, output_dist.cap)
    elif isinstance(max_tokens, str) and max_tokens == "output_len":
        caps = output_lens.copy()
    elif isinstance(max_tokens, numbers.Integral) and not isinstance(max_tokens, bool):
        caps = np.full_like(output_lens, check_int("max_tokens", max_tokens, minimum=1))
    else:
        raise ValueError("max_tokens must be None, an int >= 1 or 'output_len', "
                         f"got {max_tokens!r}")
    return np.minimum(output_lens, caps), caps


def make_workload(num_requests: int, prompt_dist: LengthDist, output_dist: LengthDist,
                  arrival: str = "burst", rate: float | None = None,
                  max_tokens: int | str | None = None, seed: int = 0,
                  priorities: Sequence[int] | None = None) -> list[RequestSpec]:
    """Draw `num_requests` requests; the same arguments always give the same list.

    `priorities`: if given, each request gets one of these values, uniformly at random
    (e.g. (0, 1) for "interactive" vs "batch"); otherwise every priority is 0.
    """
    num_requests = check_int("num_requests", num_requests, minimum=0)
    seed = check_int("seed", seed, minimum=0, hint="numpy seeds are non-negative")
    if not isinstance(prompt_dist, LengthDist) or not isinstance(output_dist, LengthDist):
        raise TypeError("prompt_dist and output_dist must be LengthDist objects (fixed(...), "
                        f"lognormal(...), ...), got {prompt_dist!r} and {output_dist!r}")
    if priorities is not None:
        priorities = check_int_list("priorities", priorities)
        if not priorities:
            raise ValueError("priorities must list at least one value, or be None")
    # one independent stream per quantity, derived from the one seed
    prompt_rng, output_rng, arrival_rng, priority_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
    prompt_lens = prompt_dist.sample(prompt_rng, num_requests)
    output_lens, caps = _resolve_max_tokens(
        max_tokens, output_dist.sample(output_rng, num_requests), output_dist)
    arrivals = arrival_times(arrival_rng, num_requests, arrival, rate)
    prios = (priority_rng.choice(np.asarray(priorities), size=num_requests)
             if priorities else np.zeros(num_requests, dtype=np.int64))
    return [RequestSpec(f"req-{i}", int(prompt_lens[i]), int(output_lens[i]), int(caps[i]),
                        float(arrivals[i]), int(prios[i]))
            for i in range(num_requests)]


# Ready-made (prompt, output) length distributions.
#
# "sharegpt_like": the ShareGPT conversations (real ChatGPT chats) used by the vLLM
# paper (Kwon et al., SOSP 2023, Fig. 11) and by vLLM's benchmark scripts have, roughly,
# prompts of ~160 tokens and outputs of ~340 tokens on average, both with a long right
# tail. A lognormal with sigma = 1 and medians 100 / 200 has means ≈ 165 / ≈ 330: close
# enough to show the same effects, NOT a fit to the data set — approximate on purpose.
# "chat": short-ish questions, answers whose lengths vary wildly (Pareto tail, alpha 1.2):
# the case where iteration-level scheduling wins most.
# "classification": medium prompts, answers of 1–3 tokens ("positive"/"negative"): almost
# no length variance, so static batching wastes almost nothing.
PRESETS: dict[str, tuple[LengthDist, LengthDist]] = {
    "sharegpt_like": (lognormal(100, 1.0, cap=2048), lognormal(200, 1.0, cap=2048)),
    "chat": (lognormal(64, 0.8, cap=1024), pareto(16, 1.2, cap=1024)),
    "classification": (uniform(32, 256), uniform(1, 3)),
}


def preset_workload(name: str, num_requests: int, **kwargs) -> list[RequestSpec]:
    """`make_workload` with one of the PRESETS' length distributions."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {tuple(PRESETS)}")
    prompt_dist, output_dist = PRESETS[name]
    return make_workload(num_requests, prompt_dist, output_dist, **kwargs)


SEED_OUTPUT_LENS = (30, 40, 50, 60, 700, 80, 90, 100)


def seed_example(prompt_len: int = 8, max_tokens: int | None = None) -> list[RequestSpec]:
    """The seed article's worked example: 8 requests, all at t = 0, one straggler.

    Output lengths 30, 40, 50, 60, 700, 80, 90, 100. In a static batch of 8 slots the
    batch lasts 700 iterations: 8 × 700 = 5600 slot-iterations, of which only
    30 + 40 + … + 100 = 1150 produce a token — 79.5% of the slots sit idle.
    `max_tokens=None` sends each request's exact output length as its cap.
    """
    prompt_len = check_int("prompt_len", prompt_len, minimum=1)
    if max_tokens is not None:
        max_tokens = check_int("max_tokens", max_tokens, minimum=1, hint="or None for each request's own length")
    return [RequestSpec(f"req-{i}", prompt_len, n, n if max_tokens is None else max(n, max_tokens))
            for i, n in enumerate(SEED_OUTPUT_LENS)]


def stutter_workload(num_decoders: int = 6, decode_len: int = 160, num_long: int = 3,
                     long_prompt: int = 1000, first_arrival: float = 1.5, gap: float = 2.5,
                     short_prompt: int = 32, long_output: int = 16) -> list[RequestSpec]:
    """Steady streams from t = 0, then `num_long` long prompts `gap` seconds apart.

    The streams ("dec-i") have short prompts and long answers; the long requests
    ("long-j") have `long_prompt`-token prompts and short answers (think: "summarise
    this document"). Without chunked prefill each long prompt runs in one step that
    every stream waits for: their tokens stutter. Output lengths are exact.
    """
    num_decoders = check_int("num_decoders", num_decoders, minimum=0)
    num_long = check_int("num_long", num_long, minimum=0)
    gap = check_number("gap", gap, minimum=0, hint="seconds between long prompts")
    decoders = [RequestSpec(f"dec-{i}", short_prompt, decode_len, decode_len)
                for i in range(num_decoders)]
    longs = [RequestSpec(f"long-{j}", long_prompt, long_output, long_output,
                         arrival_time=first_arrival + j * gap) for j in range(num_long)]
    return decoders + longs


def chat_burst(num_requests: int = 32, max_tokens: int = 256, seed: int = 0) -> list[RequestSpec]:
    """Chat-like requests, all at t = 0: ~40-token prompts, answers of median 40 tokens
    with a long tail, and every client sending the same `max_tokens` cap.

    A contiguous KV reservation holds `prompt + max_tokens` for each of them, while most
    answers use a small part of it: the gap the KV map shows.
    """
    max_tokens = check_int("max_tokens", max_tokens, minimum=1)
    return make_workload(num_requests, lognormal(40, 0.3, cap=128),
                         lognormal(40, 0.8, cap=max_tokens), max_tokens=max_tokens, seed=seed)


# name -> the function that builds the scenario (call it with its keyword arguments)
SCENARIOS = {"seed": seed_example, "stutter": stutter_workload, "chat-burst": chat_burst}
