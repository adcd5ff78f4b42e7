"""Argument checks shared by every public entry point.

A bad value must fail where it is given — in `SamplingParams(...)`, `LLM(...)`,
`generate(...)`, `add_request(...)`, a command-line flag — with a message that names the
parameter, shows the value, and says what to give instead. Deep inside a step it would
cost a whole batch, or hang the engine (a `nan` arrival time is never "due").

Each helper raises `TypeError` for a value of the wrong kind and `InvalidValue` (a
`ValueError`) for a value of the right kind outside its range, and returns the value (as
a plain `int`/`float`). `InvalidValue.param` names the parameter, so a caller that
speaks another protocol (the server's HTTP errors) can name it too without re-checking.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable


INT64_MAX = 2**63 - 1     # every int the engine keeps must fit a tensor / a seed


class InvalidValue(ValueError):
    """A value outside what `param` allows; `code` is a machine-readable kind, if any
    (e.g. "context_length_exceeded", OpenAI's name for a prompt too long)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param, self.code = param, code


class InvariantError(RuntimeError):
    """A part of the engine broke a rule every step relies on (a block handed out twice, a
    plan over the token budget, …): the whole run is wrong, not one request, so the engine
    stops instead of failing that request alone. Lesson 13's checks raise it."""


def reworded(error: Exception, message: str) -> Exception:
    """`error` with another message, its kind and attributes (`param`, `code`) kept."""
    new = type(error)(message)
    new.__dict__.update(error.__dict__)
    return new


def check_int(name: str, value, minimum: int | None = None, hint: str = "") -> int:
    """An integer (bool is not one; numpy integers are, and come back as `int`), at least
    `minimum` when given, and within 64 bits."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise InvalidValue(f"{name} must be >= {minimum}, got {value}{_hint(hint)}", name)
    if abs(value) > INT64_MAX:
        raise InvalidValue(f"{name} must fit in 64 bits (|{name}| <= {INT64_MAX}), "
                           f"got {_short(value)}", name)
    return value


def check_number(name: str, value, minimum: float | None = None, *, above: bool = False,
                 hint: str = "") -> float:
    """A finite real number (bool is not one), returned as `float`; >= `minimum`, or > it
    with `above=True`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    try:
        value = float(value)
    except OverflowError:
        raise InvalidValue(f"{name} must be a finite number, got {_short(value)}: it is "
                           "beyond float range", name) from None
    if not math.isfinite(value):
        raise InvalidValue(f"{name} must be a finite number, got {value}{_hint(hint)}", name)
    if minimum is not None and (value <= minimum if above else value < minimum):
        relation = ">" if above else ">="
        raise InvalidValue(f"{name} must be {relation} {minimum}, got {value}{_hint(hint)}", name)
    return value


def check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def check_choice(name: str, value, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise InvalidValue(f"{name} must be one of {choices}, got {value!r}", name)
    return value


def check_int_list(name: str, values) -> list[int]:
    """A list or tuple of ints (numpy integers welcome), returned as a new list."""
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, (list, tuple)):
        hint = " (a tensor or array: call .tolist() first)" if hasattr(values, "tolist") else ""
        raise TypeError(f"{name} must be a list of ints, got {type(values).__name__}{hint}")
    return [check_int(f"{name}[{i}]", v) for i, v in enumerate(values)]


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}…({len(text)} digits)"


def _hint(hint: str) -> str:
    return f": {hint}" if hint else ""
