"""A runner without a model: a cost model decides how long each step takes.

The scheduler never looks inside the forward pass — it only needs to know, after each
step, which sequences produced which token and what time it is. So we can replace the
model with two small rules and keep *every other part of the engine real* (the
schedulers, the block manager, preemption, the Trace):

1. **time**: a step costs `CostModel.step_time(plan)` seconds on a simulated clock —
   a linear model of what the step computes;
2. **tokens**: each sequence that samples gets a filler token, and the EOS token
   exactly when it reaches the output length its workload drew for it. The engine
   still stops it the normal way (EOS → "stop"), and `max_tokens` stays only a cap,
   so the contiguous reservation of static batching wastes as much memory as it
   would with a real model.

The simulated forward costs next to nothing; what remains is the engine's own Python
(scheduling, bookkeeping, the Trace) — fast enough for widgets at slider speed and for
property tests that run many schedules (`python -m benchmarks simulator` measures it).

The cost model: one step of a decoder-only model costs roughly

    step_time = step_overhead                       launch + Python + reading the weights once
              + per_prefill_token  · prefill tokens   each prompt token: the full matmul work
              + per_decode_seq     · decode rows      each decode row: matmuls + its logits row
              + per_context_token  · attention pairs  each (query, cached key) pair attention reads

where a row running `n` new tokens after `s` cached ones reads `n·s + n(n+1)/2` (query,
key) pairs (causal: token i sees s + i keys); for a decode row that is simply its context
length. Decode is memory-bound: the overhead term (reading all weights) dominates and a
bigger batch shares it — which is *why* batching pays (lesson 01).

`calibrate(trace)` (`calibrate.py`) fits the four numbers to a Trace recorded on the
real model, so the simulator can be re-tuned to whatever machine a learner has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from minillm.engine.checks import check_number
from minillm.engine.runner import Runner
from minillm.engine.trace import StepRecord
from minillm.scheduler import SchedulerOutput

FEATURES = ("step_overhead", "per_prefill_token", "per_decode_seq", "per_context_token")


def attention_pairs(num_new_tokens: int, num_cached: int) -> int:
    """(query, key) pairs causal attention computes for `n` new tokens after `s` cached."""
    n, s = num_new_tokens, num_cached
    return n * s + n * (n + 1) // 2


def plan_features(plan: SchedulerOutput) -> tuple[int, int, int, int]:
    """(1, prefill tokens, decode rows, attention pairs) of a plan, before it runs."""
    prefill = decode = pairs = 0
    for row in plan.scheduled:
        if row.is_decode:
            decode += 1
        else:
            prefill += row.num_new_tokens
        pairs += attention_pairs(row.num_new_tokens, row.seq.num_computed_tokens)
    return 1, prefill, decode, pairs


def step_features(step: StepRecord) -> tuple[int, int, int, int]:
    """The same features read back from a Trace row (context_len is *after* the step)."""
    prefill = decode = pairs = 0
    for e in step.scheduled:
        n = e.num_prefill_tokens + e.num_decode_tokens
        prefill += e.num_prefill_tokens
        decode += e.num_decode_tokens          # a decode row runs exactly one token
        pairs += attention_pairs(n, e.context_len - n)
    return 1, prefill, decode, pairs


@dataclass
class CostModel:
    """Seconds per unit of work; see the module docstring for the formula.

    The defaults approximate SmolLM2-135M in fp32 on the course's 2-core CPU: a fixed
    cost per step, a cost per decode row and per context token fitted to decode step
    times at batch 1–64, and an estimated cost per prefill token (how they were measured
    is in `docs/performance.md`, "The simulator's cost model"). Run `calibrate` on a
    Trace of your own machine to replace all four.
    """

    step_overhead: float = 0.035
    per_prefill_token: float = 0.0015
    per_decode_seq: float = 0.0020
    per_context_token: float = 2e-6
    fit: dict | None = field(default=None, compare=False, repr=False)  # set by calibrate

    def __post_init__(self) -> None:
        for name in FEATURES:
            setattr(self, name, check_number(name, getattr(self, name), 0.0,
                                             hint="seconds per unit of work"))

    @property
    def coefficients(self) -> np.ndarray:
        """The four costs as an array [4], in FEATURES order."""
        return np.array([getattr(self, name) for name in FEATURES])

    def time_of(self, features) -> float:
        """Seconds for a step with these (1, prefill, decode, pairs) features."""
        return (self.step_overhead * features[0] + self.per_prefill_token * features[1]
                + self.per_decode_seq * features[2] + self.per_context_token * features[3])

    def step_time(self, plan: SchedulerOutput) -> float:
        """Seconds the simulated step takes (0 for an empty plan)."""
        return self.time_of(plan_features(plan)) if plan.scheduled else 0.0

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in FEATURES}


DEFAULT_COST_MODEL = CostModel()


class SimRunner(Runner):
    """The engine's runner, simulated: a clock that jumps, and tokens from the workload.

    `output_lens[request_id]` is how many tokens that request generates before EOS;
    a request the runner does not know runs until its `max_tokens` (or stop rule).
    """

    def __init__(self, cost_model: CostModel | None = None, eos_token_id: int | None = 2,
                 vocab_size: int = 49152, output_lens: dict[str, int] | None = None):
        if vocab_size < 2:
            raise ValueError("vocab_size must be >= 2: the simulator needs EOS and a filler token")
        self.cost_model = DEFAULT_COST_MODEL if cost_model is None else cost_model
        self.eos_token_id = eos_token_id
        # any token that is not EOS will do: the simulator never looks at token values
        self.filler_token_id = 0 if eos_token_id != 0 else 1
        self.output_lens: dict[str, int] = dict(output_lens or {})
        self._now = 0.0

    def now(self) -> float:
        return self._now

    def wait_until(self, t: float) -> None:
        """Nothing to do until `t`: a simulated clock simply jumps there."""
        self._now = max(self._now, t)

    def reset_clock(self) -> float:
        before, self._now = self._now, 0.0
        return before

    def execute(self, plan: SchedulerOutput) -> list[list[int]]:
        """Advance the clock by the step's cost; one token per sampling row, else []."""
        self._now += self.cost_model.step_time(plan)
        return [[self._next_token(row.seq)] if row.samples else [] for row in plan.scheduled]

    def _next_token(self, seq) -> int:
        """EOS if this token is the request's last one (by the workload), filler otherwise."""
        target = self.output_lens.get(seq.request_id)
        if target is not None and self.eos_token_id is not None \
                and seq.num_output_tokens + 1 >= target:
            return self.eos_token_id
        return self.filler_token_id
