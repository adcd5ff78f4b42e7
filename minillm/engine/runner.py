"""What executes one engine step, and the clock it keeps.

The engine hands each step's plan to a `Runner` and never asks what is behind it:
`ModelRunner` (`model/model_runner.py`) runs the real model on a wall clock, `SimRunner`
(`sim/sim_runner.py`) prices the step with a cost model and jumps its own clock. That one
interface is what lets every scheduler, widget and lesson run on either.
"""

from __future__ import annotations

import abc
import math
import time

from minillm.scheduler import SchedulerOutput


class Runner(abc.ABC):
    """What the engine needs from whatever executes a step (`ModelRunner`, `SimRunner`)."""

    max_idle_wait = math.inf   # seconds an idle step() waits at most (a real clock: short)

    @abc.abstractmethod
    def now(self) -> float:
        """Seconds on this runner's clock."""

    @abc.abstractmethod
    def wait_until(self, t: float) -> None:
        """Idle until the clock reads `t` (nothing to run before the next arrival)."""

    @abc.abstractmethod
    def reset_clock(self) -> float:
        """Start the clock again at 0; return the time it read before."""

    @abc.abstractmethod
    def execute(self, plan: SchedulerOutput) -> list:
        """Run one step; per plan row, the tokens it produced.

        [] — the row samples nothing (a prefill chunk that stops mid-prompt);
        [t] — the sampled next token;
        [t0, …, td] — a row with d speculative guesses: the model's greedy pick at the
        newest token and at each guess (the engine keeps the ones that agree);
        an Exception — this row alone failed (e.g. its sampling): its request ends
        with an error and the others go on.
        """


class WallClock:
    """Seconds since the clock was (re)started, on `time.perf_counter`."""

    def __init__(self):
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def wait_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            time.sleep(delay)

    def reset(self) -> float:
        before, self._t0 = self.now(), time.perf_counter()
        return before
