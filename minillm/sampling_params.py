"""How one request wants its tokens chosen and when it wants to stop.

`SamplingParams` has vLLM's name and vLLM's meaning for every field, so a learner's
script moves to vLLM by changing one import. Every value is checked when the object is
built, and again when a field is changed: a bad value fails *here*, with a message that
says what to change, instead of deep inside the engine after other requests have
already started. The engine keeps its own checked copy (`clone`) of each request's
params.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, fields

from minillm.engine.checks import (InvalidValue, check_bool, check_int, check_int_list,
                                   check_number)


# vLLM SamplingParams fields minillm does not implement, and what to use instead
NOT_IMPLEMENTED = {
    "stop": "stop strings are not implemented: use stop_token_ids",
    "n": "one completion per request: call generate with the prompt repeated",
    "best_of": "one completion per request",
    "presence_penalty": "penalties are not implemented",
    "frequency_penalty": "penalties are not implemented",
    "repetition_penalty": "penalties are not implemented",
    "min_p": "min_p is not implemented: use top_p or top_k",
    "min_tokens": "min_tokens is not implemented",
    "logprobs": "logprobs are not returned",
    "prompt_logprobs": "logprobs are not returned",
}


@dataclass(init=False)
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

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 max_tokens: int = 16, ignore_eos: bool = False,
                 stop_token_ids: list[int] | None = None, seed: int | None = None, **other):
        if other:
            raise TypeError(_unknown_fields(other))
        values = dict(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens,
                      ignore_eos=ignore_eos, stop_token_ids=stop_token_ids, seed=seed)
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self.validate()
        object.__setattr__(self, "_checked", True)

    def __setattr__(self, name: str, value) -> None:
        """A field changed after construction is checked again (and left as it was if bad);
        a name that is no field is an error, not a silent new attribute."""
        if name not in self.__dataclass_fields__:
            raise AttributeError(_unknown_fields({name: value}))
        old = self.__dict__[name]
        object.__setattr__(self, name, value)
        try:
            self.validate()
        except (TypeError, ValueError):
            object.__setattr__(self, name, old)
            raise

    def validate(self) -> None:
        """Check every field and store it in its plain type (float, int, list of ints)."""
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        put("temperature", check_number("temperature", self.temperature, 0.0, hint="0 means greedy"))
        put("top_p", check_number("top_p", self.top_p))
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidValue(f"top_p must be in (0, 1] (1 keeps every token), got {self.top_p}",
                               "top_p")
        put("top_k", check_int("top_k", self.top_k, -1, hint="use k >= 1, or 0 / -1 to keep every token"))
        put("max_tokens", check_int("max_tokens", self.max_tokens, 1))
        check_bool("ignore_eos", self.ignore_eos)
        if self.stop_token_ids is not None:
            ids = check_int_list("stop_token_ids", self.stop_token_ids)
            for i, token_id in enumerate(ids):
                check_int(f"stop_token_ids[{i}]", token_id, 0, hint="token ids are >= 0")
            put("stop_token_ids", ids)
        if self.seed is not None:
            put("seed", check_int("seed", self.seed))

    def clone(self) -> "SamplingParams":
        """A checked copy: what the engine keeps, so later edits to yours change nothing."""
        return SamplingParams(**{f.name: getattr(self, f.name) for f in fields(self)})

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic argmax."""
        return self.temperature == 0.0


def _unknown_fields(given: dict) -> str:
    """Why these keyword arguments are not SamplingParams fields, and what to use instead."""
    import difflib
    known = [f for f in SamplingParams.__dataclass_fields__]
    notes = []
    for name in given:
        if name in NOT_IMPLEMENTED:
            notes.append(f"{name!r}: vLLM has it, minillm does not ({NOT_IMPLEMENTED[name]})")
        else:
            close = difflib.get_close_matches(name, known, n=1)
            notes.append(f"{name!r} is not a field" + (f"; did you mean {close[0]!r}?" if close
                                                       else f"; the fields are {known}"))
    return "SamplingParams: " + "; ".join(notes)


def request_seed(params: SamplingParams, engine_seed: int, request_id: str) -> int:
    """The seed a request samples with: its own `seed`, or one derived from the engine's
    seed and the request id — so the same script gives the same samples run after run."""
    if params.seed is not None:
        return params.seed
    return (engine_seed * 1_000_003 + zlib.crc32(request_id.encode())) % (2**63)
