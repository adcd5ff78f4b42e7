"""Check 2, "scripts run unchanged": a lesson's marked script on minillm and on vLLM.

A code cell marked `# runs on vLLM unchanged` holds a function taking
`(LLM, SamplingParams, model)`. Here it runs twice, as the lesson wrote it: with
minillm's classes and the model's name, then (in vLLM's virtualenv, `vllm_side.py`)
with vLLM's classes and the Hugging Face folder minillm converted — exactly the call
lesson 10 shows. With greedy sampling and `dtype="float32"` in the script, both
engines compute the same function in the same precision, so their texts must be
identical; they are printed side by side.
"""

from __future__ import annotations

import gc
import re

from compat.notebooks import Script
from compat.report import Check


def edited(script: Script, edits: list[tuple[str, str]]) -> Script:
    """The script with `--edit-script OLD=>NEW` replacements (to show the check failing)."""
    code = script.code
    for old, new in edits:
        if old not in code:
            raise ValueError(f"--edit-script: {old!r} is not in {script.function}")
        code = code.replace(old, new)
    return Script(script.lesson, script.function, code)


def run_on_minillm(script: Script, model: str = "smollm2-135m") -> list[str]:
    """Define the lesson's function and call it with minillm's classes."""
    import minillm
    namespace = {"__name__": "lesson"}
    exec(compile(script.code, f"<lesson: {script.function}>", "exec"), namespace)
    try:
        return namespace[script.function](minillm.LLM, minillm.SamplingParams, model)
    finally:
        namespace.clear()
        gc.collect()


def side_by_side(minillm_texts: list[str], vllm_texts: list[str]) -> list[str]:
    lines = []
    for i, (ours, theirs) in enumerate(zip(minillm_texts, vllm_texts)):
        mark = "=" if ours == theirs else "≠"
        lines += [f"  [{i}] {mark} minillm: {ours!r}", f"        vLLM:    {theirs!r}"]
    return lines


ERROR_LINE = re.compile(r"\b\w+(?:Error|Exception): .+")


def root_cause(vllm_log: str) -> str | None:
    """The first error vLLM's processes logged: its engine core runs in a process of its
    own, so the exception the script sees only says "Engine core initialization failed"."""
    found = ERROR_LINE.search(vllm_log)
    return found.group(0) if found else None


def check_script(script: Script, minillm_texts, vllm_answer: dict,
                 vllm_log: str = "") -> list[Check]:
    """Two rows: it runs on vLLM; its greedy texts are identical."""
    name = f"{script.lesson}.{script.function}"
    if "error" in vllm_answer:
        cause = root_cause(vllm_log)
        detail = f"fails on vLLM: {cause or vllm_answer['error']}"
        return [Check(f"script runs on vLLM: {name}", False, detail,
                      notes=[f"{name} on vLLM:", *("  " + t for t in vllm_answer["traceback"])])]
    vllm_texts = vllm_answer["ok"]["texts"]
    rows = [Check(f"script runs on vLLM: {name}", True,
                  f"ran as written, {len(vllm_texts)} outputs (LLM with enforce_eager=True)")]
    same = sum(a == b for a, b in zip(minillm_texts, vllm_texts))
    identical = len(minillm_texts) == len(vllm_texts) == same
    detail = (f"{same}/{max(len(minillm_texts), len(vllm_texts))} greedy texts identical "
              "(fp32, side by side below)")
    rows.append(Check(f"same greedy texts: {name}", identical, detail,
                      notes=[f"{name}, minillm vs vLLM:",
                             *side_by_side(minillm_texts, vllm_texts)]))
    return rows
