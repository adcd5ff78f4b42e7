"""Compare two servers' answers by their shape: which fields, of which JSON types.

Values such as ids and timestamps differ on every call, so a response is reduced to its
*shape*: every path to a field (`choices[].message.content`), with the JSON types seen
there. A stream is the union of its chunks' shapes.

    shape({"choices": [{"text": "Paris", "logprobs": None}]})
    == {"choices": {"array"}, "choices[]": {"object"},
        "choices[].text": {"string"}, "choices[].logprobs": {"null"}}

OpenAI's own client library (the `openai` package the course pins) says which fields
the API defines, and `model_validate` says whether an answer is a valid one; together
they decide which difference is an acceptable extra and which is a defect.
"""

from __future__ import annotations

import types
import typing
from collections import defaultdict

from pydantic import BaseModel, ValidationError

JSON_TYPES = {type(None): "null", bool: "boolean", int: "integer", float: "number",
              str: "string", list: "array", dict: "object"}


def shape(value, path: str = "", into: dict | None = None) -> dict[str, set[str]]:
    """{path: the JSON types found there} for every field of `value`, nested ones too."""
    into = defaultdict(set) if into is None else into
    if path:
        into[path].add(JSON_TYPES[type(value)])
    if isinstance(value, dict):
        for key, item in value.items():
            shape(item, f"{path}.{key}" if path else key, into)
    elif isinstance(value, list):
        for item in value:
            shape(item, f"{path}[]", into)
    return into


def stream_shape(chunks: list[dict]) -> dict[str, set[str]]:
    merged = defaultdict(set)
    for chunk in chunks:
        shape(chunk, into=merged)
    return merged


def without(value, path: str):
    """`value` with the field at `path` removed (`--drop-field`, to see a check fail)."""
    return _drop(value, path.split("."))


def _drop(value, parts: list[str]):
    key, rest = parts[0].removesuffix("[]"), parts[1:]
    if not isinstance(value, dict) or key not in value:
        return value
    out = dict(value)
    if not rest:
        del out[key]
    elif parts[0].endswith("[]") and isinstance(value[key], list):
        out[key] = [_drop(item, rest) for item in value[key]]
    else:
        out[key] = _drop(value[key], rest)
    return out


# ---------------------------------------------------------------- OpenAI's types

def _inner(annotation):
    """Optional[X] → X, Annotated[X, ...] → X (what a value at that field must be)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _inner(args[0]) if len(args) == 1 else annotation
    if origin is typing.Annotated:
        return _inner(typing.get_args(annotation)[0])
    return annotation


def openai_field(model: type[BaseModel], path: str):
    """OpenAI's definition (a pydantic FieldInfo) of the field at `path`, or None."""
    annotation, field = model, None
    for part in path.split("."):
        name, is_list = part.removesuffix("[]"), part.endswith("[]")
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        field = annotation.model_fields.get(name)
        if field is None:
            return None
        annotation = _inner(field.annotation)
        if is_list:
            args = typing.get_args(annotation)
            annotation = _inner(args[0]) if args else None
    return field


def declared(model: type[BaseModel], path: str) -> bool:
    return openai_field(model, path) is not None


def nullable(model: type[BaseModel], path: str) -> bool:
    """Whether OpenAI allows null at `path` (its type is Optional[...])."""
    field = openai_field(model, path)
    if field is None or path.endswith("[]"):
        return False
    return type(None) in typing.get_args(field.annotation)


def validation_errors(model: type[BaseModel], payload: dict) -> list[tuple[str, str]]:
    """[(path, pydantic's message)] for each way `payload` is not a valid `model`."""
    try:
        model.model_validate(payload)
        return []
    except ValidationError as error:
        return [(loc_path(e["loc"]), e["msg"]) for e in error.errors()]


def loc_path(loc: tuple) -> str:
    """pydantic's ("choices", 0, "text") → this module's "choices[].text"."""
    path = ""
    for part in loc:
        path += "[]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


# ---------------------------------------------------------------- the comparison

def compare(ours: dict[str, set[str]], theirs: dict[str, set[str]], model: type[BaseModel],
            vllm_invalid: set[str] = frozenset(),
            accepted: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Sort every difference between minillm's shape (`ours`) and vLLM's (`theirs`).

    Defects:

    * `type_mismatches` — a field both send, with different JSON types: a client
      written for one breaks on the other;
    * `missing` — a field OpenAI defines that vLLM fills with a value and minillm
      leaves out, unless `accepted` gives the reason it may;
    * `ours_unknown` — a field only minillm sends that OpenAI does not define.

    Acceptable:

    * `null_or_value` — the types differ only by null on one side, where OpenAI allows
      null (`usage: null` in every chunk but the last, as OpenAI's API sends it);
    * `vllm_deviations` — a field where vLLM's value is not what OpenAI's type allows
      (`vllm_invalid`); minillm follows OpenAI;
    * `vllm_extensions` — fields only vLLM sends that OpenAI does not define;
    * `openai_defaults` — fields OpenAI defines that vLLM sends as null, the default
      (leaving one out says the same);
    * `accepted_omissions` — the `accepted` ones, with their reasons;
    * `ours_openai` — fields only minillm sends that OpenAI defines.
    """
    accepted = accepted or {}
    found = {key: [] for key in ("type_mismatches", "null_or_value", "vllm_deviations",
                                 "missing", "vllm_extensions", "openai_defaults",
                                 "accepted_omissions")}
    for path in sorted(ours.keys() & theirs.keys()):
        if ours[path] == theirs[path]:
            continue
        line = (f"{path}: minillm {'|'.join(sorted(ours[path]))}, "
                f"vLLM {'|'.join(sorted(theirs[path]))}")
        if ours[path] - {"null"} == theirs[path] - {"null"} and nullable(model, path):
            found["null_or_value"].append(line)
        elif path in vllm_invalid:
            found["vllm_deviations"].append(line)
        else:
            found["type_mismatches"].append(line)
    for path in top_level(sorted(theirs.keys() - ours.keys())):
        if not declared(model, path):
            found["vllm_extensions"].append(path)
        elif theirs[path] <= {"null"}:
            found["openai_defaults"].append(path)
        elif path in accepted:
            found["accepted_omissions"].append(f"{path} ({accepted[path]})")
        else:
            found["missing"].append(path)
    only_ours = sorted(ours.keys() - theirs.keys())
    found["ours_openai"] = [p for p in only_ours if declared(model, p)]
    found["ours_unknown"] = top_level([p for p in only_ours if not declared(model, p)])
    return found


def top_level(paths: list[str]) -> list[str]:
    """Drop paths inside another listed path: `a` stands for `a.b` and `a[].c`."""
    return [p for p in paths if not any(p.startswith(q + ".") or p.startswith(q + "[]")
                                        for q in paths if q != p)]
