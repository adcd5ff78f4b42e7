"""How one request wants its tokens chosen and when it wants to stop.

`SamplingParams` has vLLM's name and vLLM's meaning for every field, so a learner's
script moves to vLLM by changing one import. Every value is checked when the object is
built: a bad value fails *here*, with a message that says what to change, instead of
deep inside the engine after other requests have already started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    """Decoding settings for one request.

    temperature: 0 means greedy (always the most likely token); higher flattens the
        distribution. Must be >= 0.
    top_p: nucleus sampling — keep the smallest set of tokens whose probabilities add
        up to `top_p`. In (0, 1]; 1 keeps everything.
    top_k: keep only the `k` most likely tokens; 0 or -1 keeps everything.
    max_tokens: how many tokens to generate at most (>= 1).
    ignore_eos: when True the end-of-sequence token neither stops the request nor is
        masked out: the request always runs to `max_tokens` (vLLM's meaning; useful
        for benchmarks that need exact output lengths).
    stop_token_ids: extra token ids that end the request (the stop token is kept in
        the output, like EOS).
    seed: per-request random seed; the same seed gives the same sampled tokens no
        matter what else is in the batch.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = field(default=None)
    seed: int | None = None

    def __post_init__(self) -> None:
        self._check_number("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(
                f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        self._check_number("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        self._check_int("top_k", self.top_k)
        if self.top_k < -1:
            raise ValueError(f"top_k must be >= 1, or 0 / -1 to disable it; got {self.top_k}")
        self._check_int("max_tokens", self.max_tokens)
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"ignore_eos must be a bool, got {type(self.ignore_eos).__name__}")
        if self.stop_token_ids is not None:
            ids = list(self.stop_token_ids)
            for token_id in ids:
                self._check_int("each stop_token_ids entry", token_id)
                if token_id < 0:
                    raise ValueError(f"stop_token_ids must be >= 0, got {token_id}")
            self.stop_token_ids = ids
        if self.seed is not None:
            self._check_int("seed", self.seed)

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic argmax."""
        return self.temperature == 0.0

    @staticmethod
    def _check_number(name: str, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")

    @staticmethod
    def _check_int(name: str, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
