"""What the lessons claim about vLLM, read out of the notebooks themselves.

The checks follow the lessons as they change, so nothing here lists a flag or copies a
script by hand:

* **scripts** — a code cell with the line `# runs on vLLM unchanged` promises that its
  functions taking `(LLM, SamplingParams, model)` run on both engines; `marked_scripts`
  returns each such function's source, exactly as the lesson has it;
* **flags** — `vllm_flag_claims` collects every `--flag` a lesson names for vLLM:
  the vLLM column of a markdown table (a cell saying "same" names the first column's
  flags), a fenced command that starts with `vllm ...`, and the string literals of a code
  cell that builds a `vllm serve` command line; `readme_flag_claims` the flags the
  README calls "vLLM's flag names";
* **values** — `vllm_argv_claims`: a table's code span that gives a flag *with* a value
  (`--scheduling-policy fcfs / priority`, `--speculative-config '{...}'`) is a command
  line that vLLM must accept, one per alternative.
"""

from __future__ import annotations

import ast
import io
import json
import re
import shlex
import tokenize
from dataclasses import dataclass
from pathlib import Path

MARKER = "# runs on vLLM unchanged"
SCRIPT_PARAMETERS = ["LLM", "SamplingParams", "model"]
FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
CELL_SPLIT = re.compile(r"(?<!\\)\|")          # `a\|b` inside a cell is not a column break
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
CODE_SPAN = re.compile(r"`([^`]+)`")
README_CLAIM = re.compile(r"vLLM's flag\s+names:\s*`([^`]+)`")


@dataclass(frozen=True)
class Script:
    lesson: str          # "10_beyond"
    function: str        # "serve_script"
    code: str            # the function's source, as written in the cell


@dataclass(frozen=True)
class FlagClaim:
    flag: str            # "--max-num-seqs"
    lesson: str          # "08_benchmarking"
    where: str           # "table", "command", "code"
    parser: str          # which vLLM command must accept it: "serve" or "bench_serve"
    engine_knob: bool    # also a `vllm.LLM(...)` keyword, i.e. an EngineArgs field


@dataclass(frozen=True)
class ArgvClaim:
    argv: tuple[str, ...]    # ("--scheduling-policy", "priority")
    lesson: str


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def lesson_paths(lessons_dir: Path) -> list[Path]:
    return sorted(lessons_dir.glob("[0-9][0-9]_*.ipynb"))


# ---------------------------------------------------------------- scripts

def marked_scripts(lessons_dir: Path) -> list[Script]:
    """Every `(LLM, SamplingParams, model)` function of every marked code cell."""
    found = []
    for path in lesson_paths(lessons_dir):
        for cell in cells(path):
            code = source(cell)
            if cell["cell_type"] == "code" and MARKER in code.splitlines():
                found += scripts_in(path.stem, code)
    return found


def scripts_in(lesson: str, code: str) -> list[Script]:
    tree = ast.parse(code)
    return [Script(lesson, node.name, ast.get_source_segment(code, node))
            for node in tree.body if isinstance(node, ast.FunctionDef)
            and [a.arg for a in node.args.args] == SCRIPT_PARAMETERS]


# ---------------------------------------------------------------- flags

def vllm_flag_claims(lessons_dir: Path) -> list[FlagClaim]:
    """Every --flag the lessons name for vLLM, with where it was found."""
    claims = []
    for path in lesson_paths(lessons_dir):
        for cell in cells(path):
            text = source(cell)
            if cell["cell_type"] == "markdown":
                claims += table_claims(path.stem, text) + command_claims(path.stem, text)
            elif "vllm serve" in text:
                claims += code_claims(path.stem, text)
    return claims


def table_rows(text: str) -> list[list[list[str]]]:
    """The markdown tables of `text`: each a list of rows, each a list of cell texts."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.lstrip().startswith("|"):
            current.append([c.strip() for c in CELL_SPLIT.split(line.strip().strip("|"))])
        elif current:
            tables.append(current)
            current = []
    return [t for t in tables if len(t) > 2 and set("".join(t[1])) <= set("-: ")]


def vllm_cells(text: str):
    """(the vLLM cell of each table row, whether the table maps `LLM(...)` knobs).

    A cell saying "same" stands for the row's first cell. A table whose first column
    is not a server's (`minillm serve`) maps `LLM(...)` knobs, so its vLLM flags must be
    EngineArgs fields (keywords of `vllm.LLM`) as well as `vllm serve` options."""
    for header, _, *rows in table_rows(text):
        column = next((i for i, h in enumerate(header) if "vllm" in h.lower()), None)
        if column is None or column == 0:
            continue
        engine_knob = "serve" not in header[0]
        for row in rows:
            cell = row[column] if column < len(row) else ""
            yield (row[0] if cell.lower().startswith("same") else cell), engine_knob


def table_claims(lesson: str, text: str) -> list[FlagClaim]:
    """Every --flag of every table's vLLM column."""
    return [FlagClaim(f, lesson, "table", "serve", engine_knob)
            for cell, engine_knob in vllm_cells(text) for f in FLAG.findall(cell)]


def vllm_argv_claims(lessons_dir: Path) -> list[ArgvClaim]:
    """The flag-with-value code spans of the tables' vLLM columns, as command lines."""
    claims = []
    for path in lesson_paths(lessons_dir):
        for cell in cells(path):
            if cell["cell_type"] == "markdown":
                for text, _ in vllm_cells(source(cell)):
                    claims += [ArgvClaim(argv, path.stem) for span in CODE_SPAN.findall(text)
                               if span.startswith("--") for argv in argv_variants(span)]
    return claims


def argv_variants(span: str) -> list[tuple[str, ...]]:
    """`--policy a / b` or `--policy a|b` → one command line per alternative; a span
    without any value (`--block-size`) → none: there is nothing to check but the name."""
    words = []
    for word in shlex.split(span.replace("\\|", "|")):
        if words and (word == "/" or words[-1].endswith("|")):
            words[-1] += "|" if word == "/" else word          # `a / b` → `a|b`
        else:
            words.append(word)
    if all(w.startswith("--") for w in words):
        return []
    choices = [w.split("|") if w[:1] not in "-{[" else [w] for w in words]
    return [tuple(c[min(i, len(c) - 1)] for c in choices)
            for i in range(max(len(c) for c in choices))]


def readme_flag_claims(readme: Path) -> list[FlagClaim]:
    """The flags the README calls "vLLM's flag names"."""
    return [FlagClaim(f, "README", "prose", "serve", False)
            for span in README_CLAIM.findall(readme.read_text()) for f in FLAG.findall(span)]


def command_claims(lesson: str, text: str) -> list[FlagClaim]:
    """Flags of a fenced `vllm serve ...` or `vllm bench serve ...` command."""
    claims = []
    for block in FENCE.findall(text):
        command = " ".join(line.split("#")[0].rstrip(" \\") for line in block.splitlines())
        words = command.split()
        if words[:1] != ["vllm"]:
            continue
        parser = "bench_serve" if words[1:3] == ["bench", "serve"] else "serve"
        claims += [FlagClaim(f, lesson, "command", parser, False) for f in FLAG.findall(command)]
    return claims


def code_claims(lesson: str, code: str) -> list[FlagClaim]:
    """Flags in the string literals of a code cell that builds a `vllm serve` line."""
    strings = [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline)
               if t.type == tokenize.STRING]
    return [FlagClaim(f, lesson, "code", "serve", False)
            for s in strings for f in FLAG.findall(s)]
