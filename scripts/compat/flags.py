"""Check 3, "flags are real": every vLLM flag the course names exists in the installed vLLM.

Three kinds of claims, all read from the course's own files (`notebooks.py`):

* a lesson's flag (a table's vLLM column, a `vllm ...` command, a code cell building a
  `vllm serve` line) must be an option of that vLLM command's parser; a flag of a
  table mapping `LLM(...)` knobs must also be an `EngineArgs` field, so that
  `vllm.LLM(that_field=...)` works as well as `vllm serve --that-flag`;
* a flag written with a value (`--scheduling-policy priority`) must pass vLLM's
  configuration checks with that value;
* `python -m minillm serve`'s flags: one whose help does not begin with "minillm"
  claims vLLM's name, so it must exist in `vllm serve` — a switch as a switch, and
  with every value minillm lists as a choice (and its numeric default) accepted; a
  flag whose help begins with "minillm" is minillm's own, and any `vLLM: --flag` its
  help points to must exist.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass

from compat.notebooks import FLAG, ArgvClaim, FlagClaim
from compat.report import Check

PARSER_NAMES = {"serve": "vllm serve", "bench_serve": "vllm bench serve"}


@dataclass(frozen=True)
class ServerFlag:
    options: tuple[str, ...]        # ("--enable-chunked-prefill", "--no-enable-chunked-prefill")
    switch: bool                    # takes no value
    own: bool                       # minillm's own knob (its help begins with "minillm")
    values: tuple[str, ...]         # values to try on vLLM: its choices, or a numeric default
    points_to: tuple[str, ...]      # the `vLLM: --flag` its help names


def server_flags(parser: argparse.ArgumentParser | None = None) -> list[ServerFlag]:
    """The flags of `python -m minillm serve`, read from its own parser."""
    if parser is None:
        from minillm.serving.args import build_parser
        parser = build_parser()
    flags = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        help_text = action.help or ""
        flags.append(ServerFlag(tuple(action.option_strings), action.nargs == 0,
                                help_text.lower().startswith("minillm"),
                                values_to_try(action), tuple(vllm_pointers(help_text))))
    return flags


def values_to_try(action: argparse.Action) -> tuple[str, ...]:
    if action.nargs == 0:
        return ()
    if action.choices:
        return tuple(map(str, action.choices))
    default = action.default
    is_number = isinstance(default, (int, float)) and not isinstance(default, bool)
    return (str(default),) if is_number else ()


def vllm_pointers(help_text: str) -> list[str]:
    """`(vLLM: --num-gpu-blocks-override)` in a help text → ["--num-gpu-blocks-override"]."""
    return [f for part in help_text.split("vLLM:")[1:] for f in FLAG.findall(part)[:1]]


def server_argvs(flags: list[ServerFlag]) -> list[list[str]]:
    """The command lines that carry minillm's values over to `vllm serve`."""
    return [[f.options[0], v] for f in flags if not f.own for v in f.values]


def normalized(flag: str) -> str:
    """vLLM's parser takes `--max_num_seqs` for `--max-num-seqs`; so does this check."""
    return "--" + flag[2:].replace("_", "-")


def flag_problem(claim: FlagClaim, parsers: dict) -> str | None:
    """Why `claim` does not hold in the installed vLLM, or None."""
    options = parsers[claim.parser]
    option = options.get(normalized(claim.flag))
    if option is None:
        return f"{claim.flag} ({claim.where}): not an option of `{PARSER_NAMES[claim.parser]}`"
    if claim.engine_knob and option["dest"] not in parsers["engine_args"]:
        return f"{claim.flag} ({claim.where}): not an EngineArgs field ({option['dest']})"
    return None


def check_lessons(claims: list[FlagClaim], argv_claims: list[ArgvClaim], parsers: dict,
                  argv_answers: dict[tuple, str]) -> list[Check]:
    """One row per lesson (and the README): its flags and its flag values."""
    by_lesson = defaultdict(lambda: {"flags": [], "argvs": []})
    for claim in claims:
        by_lesson[claim.lesson]["flags"].append(claim)
    for claim in argv_claims:
        by_lesson[claim.lesson]["argvs"].append(claim)
    return [lesson_check(name, found["flags"], found["argvs"], parsers, argv_answers)
            for name, found in sorted(by_lesson.items())]


def lesson_check(lesson, claims, argv_claims, parsers, argv_answers) -> Check:
    problems = [p for p in (flag_problem(c, parsers) for c in claims) if p]
    problems += [f"`{' '.join(c.argv)}`: {argv_answers[c.argv]}" for c in argv_claims
                 if argv_answers[c.argv] != "ok"]
    names = sorted({c.flag for c in claims})
    knobs = sorted({c.flag for c in claims if c.engine_knob})
    if problems:
        return Check(f"flags: {lesson}", False, "; ".join(dict.fromkeys(problems)))
    parts = [f"{len(names)} flags are options of vLLM's parser"]
    if knobs:
        parts.append(f"{len(knobs)} knob-map flags are EngineArgs fields")
    if argv_claims:
        parts.append(f"{len(argv_claims)} flag+value pairs pass vLLM's config checks")
    return Check(f"flags: {lesson}", True, "; ".join(parts),
                 notes=[f"flags named by {lesson}: {' '.join(names)}"])


def server_problems(flag: ServerFlag, options: dict, argv_answers: dict) -> list[str]:
    """What keeps one `minillm serve` flag from carrying over to `vllm serve`."""
    if flag.own:
        return [f"{flag.options[0]}'s help points to {p}, which vLLM does not have"
                for p in flag.points_to if p not in options]
    missing = [o for o in flag.options if o not in options]
    if missing:
        return [f"{' / '.join(missing)}: claims vLLM's name, but `vllm serve` has no such "
                "option (mark it 'minillm: ...' in its help if it is minillm's own)"]
    problems = []
    if options[flag.options[0]]["takes_value"] == flag.switch:
        kind = "a switch" if flag.switch else "takes a value"
        problems.append(f"{flag.options[0]}: {kind} in minillm, not in vLLM")
    problems += [f"`{flag.options[0]} {v}`: {argv_answers[(flag.options[0], v)]}"
                 for v in flag.values if argv_answers[(flag.options[0], v)] != "ok"]
    return problems


def check_server(flags: list[ServerFlag], parsers: dict, argv_answers: dict) -> Check:
    options = parsers["serve"]
    problems = [p for f in flags for p in server_problems(f, options, argv_answers)]
    shared = [f.options[0] for f in flags if not f.own]
    own = [f.options[0] for f in flags if f.own]
    if problems:
        return Check("flags: minillm serve", False, "; ".join(problems))
    return Check("flags: minillm serve", True,
                 f"{len(shared)} flags are vLLM's (name, switch or value, choices); "
                 f"{len(own)} are minillm's own, marked so in --help",
                 notes=[f"minillm serve flags that are vLLM's: {' '.join(shared)}",
                        f"minillm serve's own flags: {' '.join(own)}"])
