"""Check 4, "the server speaks the same API": the same requests to both servers.

Each request goes to `python -m minillm serve` and to vLLM's server, both on
SmolLM2-135M in fp32 with greedy sampling. For each, the answers must agree on:

* **validity** — each answer (each chunk of a stream) is a valid object of OpenAI's own
  type for it, as the `openai` client library defines it;
* **fields** — the same fields with the same JSON types (`schema.compare`: fields only
  vLLM sends are listed as extras; a field only minillm sends must be one OpenAI
  defines; a field both send may differ only by being null on one side, if OpenAI
  allows null there);
* **usage** — the same prompt, completion and total token counts;
* **text** — the same greedy text, and a stream's pieces add up to the non-streamed text.

Then the course's load generator (`python -m benchmarks serve --base-url URL`)
drives each server with the same few requests, and the two summaries are printed side
by side: every request must complete on both, with the same token totals.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
from openai.types import Completion, CompletionChoice, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.shared import ErrorObject
from pydantic import create_model

from compat import schema
from compat.report import Check
from compat.servers import MODEL_NAME

ModelList = create_model("ModelList", object=(str, ...), data=(list[Model], ...))
# OpenAI streams completions as `Completion` objects whose choices have no finish
# reason yet (null) until the last one; the client library only skips validation there
StreamedChoice = create_model("StreamedChoice", __base__=CompletionChoice,
                              finish_reason=(CompletionChoice.model_fields["finish_reason"].annotation
                                             | None, None))
CompletionChunk = create_model("CompletionChunk", __base__=Completion,
                               choices=(list[StreamedChoice], ...))
ErrorResponse = create_model("ErrorResponse", error=(ErrorObject, ...))
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"model": MODEL_NAME, "temperature": 0.0}
STREAM = {"stream": True, "stream_options": {"include_usage": True}}

# name: (path, body or None for GET, OpenAI's type of the answer or of each chunk)
REQUESTS = {
    "completion": ("/v1/completions", {**GREEDY, "prompt": "The capital of France is",
                                       "max_tokens": 16}, Completion),
    "completion, streamed": ("/v1/completions", {**GREEDY, **STREAM, "max_tokens": 16,
                                                 "prompt": "The capital of France is"},
                             CompletionChunk),
    "chat": ("/v1/chat/completions", {**GREEDY, "messages": QUESTION, "max_tokens": 64},
             ChatCompletion),
    "chat, streamed": ("/v1/chat/completions", {**GREEDY, **STREAM, "messages": QUESTION,
                                                "max_tokens": 64}, ChatCompletionChunk),
    "models": ("/v1/models", None, ModelList),
    "error, unknown model": ("/v1/completions", {**GREEDY, "model": "no-such-model",
                                                 "prompt": "Hi", "max_tokens": 4}, ErrorResponse),
}
STREAMED_TWIN = {"completion, streamed": "completion", "chat, streamed": "chat"}
USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
# OpenAI fields vLLM fills in and minillm leaves out on purpose (anything else it
# leaves out is a defect the check reports)
ACCEPTED_OMISSIONS = {
    "system_fingerprint": "optional in OpenAI's API: names the serving build; minillm "
                          "has no build identity to report"}


def ask(base_url: str, path: str, body: dict | None) -> dict:
    """{"status", "body"} — or {"status", "chunks"} for a stream ([DONE] left out)."""
    url = base_url.rstrip("/") + path
    if body is None:
        response = httpx.get(url, timeout=60)
        return {"status": response.status_code, "body": response.json()}
    if not body.get("stream"):
        response = httpx.post(url, json=body, timeout=600)
        return {"status": response.status_code, "body": response.json()}
    chunks = []
    with httpx.stream("POST", url, json=body, timeout=600) as response:
        for line in response.iter_lines():
            data = line[5:].strip() if line.startswith("data:") else None
            if data == "[DONE]":
                break
            if data:
                chunks.append(json.loads(data))
    return {"status": response.status_code, "chunks": chunks}


def answers(base_url: str) -> dict[str, dict]:
    return {name: ask(base_url, path, body) for name, (path, body, _) in REQUESTS.items()}


def dropped(answer: dict, fields: list[str]) -> dict:
    """`answer` without `fields` (`--drop-field`: a deliberately broken minillm answer)."""
    out = dict(answer)
    for path in fields:
        if "body" in out:
            out["body"] = schema.without(out["body"], path)
        else:
            out["chunks"] = [schema.without(c, path) for c in out["chunks"]]
    return out


def payloads(answer: dict) -> list[dict]:
    return answer["chunks"] if "chunks" in answer else [answer["body"]]


def text_of(answer: dict) -> str | None:
    """The generated text: a choice's text or message, or a stream's pieces joined."""
    from benchmarks.serve.client import chunk_text
    if "chunks" in answer:
        return "".join(chunk_text(c) for c in answer["chunks"])
    choices = answer["body"].get("choices") or [{}]
    return choices[0].get("text", (choices[0].get("message") or {}).get("content"))


def usage_of(answer: dict) -> dict | None:
    """The token counts of the answer (a stream's last usage chunk)."""
    found = [p["usage"] for p in payloads(answer) if isinstance(p, dict) and p.get("usage")]
    return {k: found[-1].get(k) for k in USAGE_COUNTS} if found else None


def shape_of(answer: dict) -> dict:
    return schema.stream_shape(payloads(answer))


def invalid(answer: dict, sdk_type) -> list[tuple[str, str]]:
    """Where `answer` (each chunk of it) is not a valid object of OpenAI's type."""
    return [e for p in payloads(answer) for e in schema.validation_errors(sdk_type, p)]


def problems(name: str, ours: dict, theirs: dict, ours_all: dict, theirs_all: dict,
             sdk_type) -> tuple[list[str], dict, list[str]]:
    """(what is wrong with minillm's answer next to vLLM's, the field comparison, notes).

    minillm must answer as OpenAI's types say; where vLLM does not, that is a note, and
    a field where the two differ because of it follows OpenAI."""
    found, notes = [], []
    if ours["status"] != theirs["status"]:
        found.append(f"HTTP {ours['status']} vs vLLM's {theirs['status']}")
    ours_invalid, theirs_invalid = invalid(ours, sdk_type), invalid(theirs, sdk_type)
    found += [f"not a valid {sdk_type.__name__}: {path}: {msg}"
              for path, msg in dict(ours_invalid).items()]
    notes += [f"API {name}: vLLM's answer is not a valid {sdk_type.__name__} at {path} ({msg}); "
              "minillm follows OpenAI there" for path, msg in dict(theirs_invalid).items()]
    fields = schema.compare(shape_of(ours), shape_of(theirs), sdk_type,
                            {path for path, _ in theirs_invalid}, ACCEPTED_OMISSIONS)
    found += [f"type differs: {m}" for m in fields["type_mismatches"]]
    found += [f"minillm lacks OpenAI's {p}, which vLLM sends" for p in fields["missing"]]
    found += [f"minillm-only field unknown to OpenAI: {p}" for p in fields["ours_unknown"]]
    if sdk_type in (Completion, CompletionChunk, ChatCompletion, ChatCompletionChunk):
        found += same_output(name, ours, theirs, ours_all, theirs_all)
    return found, fields, notes


def same_output(name, ours, theirs, ours_all, theirs_all) -> list[str]:
    """The same usage and text on both; a stream adds up to its non-streamed twin."""
    found = []
    if usage_of(ours) != usage_of(theirs):
        found.append(f"usage {usage_of(ours)} vs vLLM's {usage_of(theirs)}")
    if text_of(ours) != text_of(theirs):
        found.append(f"text {text_of(ours)!r} vs vLLM's {text_of(theirs)!r}")
    twin = STREAMED_TWIN.get(name)
    for who, answer, everything in (("minillm", ours, ours_all), ("vLLM", theirs, theirs_all)):
        if twin and text_of(answer) != text_of(everything[twin]):
            found.append(f"{who}'s streamed pieces do not add up to its non-streamed text")
    return found


def summary_line(name: str, ours: dict, fields: dict) -> str:
    usage = usage_of(ours)
    extras = len(fields["vllm_extensions"]) + len(fields["openai_defaults"])
    parts = [f"same fields and types (+{extras} vLLM-only, listed below)"]
    if usage:
        parts.append(f"same usage {usage['prompt_tokens']}+{usage['completion_tokens']}"
                     f"={usage['total_tokens']}")
    if name in STREAMED_TWIN or name in STREAMED_TWIN.values():
        parts.append(f"same text {text_of(ours)!r}")
    if name.startswith("error"):
        parts.append(f"both HTTP {ours['status']}")
    return ", ".join(parts)


NOTE_LABELS = {"vllm_extensions": "vLLM's own extensions (acceptable extras)",
               "openai_defaults": "OpenAI fields vLLM sends as null (acceptable)",
               "accepted_omissions": "OpenAI fields minillm leaves out on purpose",
               "null_or_value": "null on one side only, as OpenAI allows",
               "vllm_deviations": "vLLM differs from OpenAI's type, minillm follows OpenAI",
               "ours_openai": "only minillm sends (OpenAI's fields)"}


def check_answers(ours_all: dict, theirs_all: dict, drop_fields: list[str]) -> list[Check]:
    """One row per request; the acceptable differences go under the table."""
    ours_all = {k: dropped(v, drop_fields) for k, v in ours_all.items()}
    rows = []
    for name, (_, _, sdk_type) in REQUESTS.items():
        ours, theirs = ours_all[name], theirs_all[name]
        found, fields, notes = problems(name, ours, theirs, ours_all, theirs_all, sdk_type)
        for key, label in NOTE_LABELS.items():
            if fields[key]:
                notes.append(f"API {name}: {label}: {'; '.join(fields[key])}")
        detail = "; ".join(found) if found else summary_line(name, ours, fields)
        rows.append(Check(f"API: {name}", not found, detail, notes=notes))
    return rows


# ---------------------------------------------------------------- the load generator

LOAD_FLAGS = ("--num-prompts", "4", "--input-len", "32", "--output-len", "16",
              "--request-rate", "inf", "--no-progress")
SIDE_BY_SIDE = ("completed", "failed", "total_input_tokens", "total_output_tokens",
                "output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms",
                "median_e2el_ms")


def load_run(base_url: str, endpoint: str, out: Path) -> dict:
    """`python -m benchmarks serve --base-url URL ...` as a learner runs it; its summary."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "benchmarks", "serve", "--base-url", base_url,
               "--model", MODEL_NAME, "--endpoint", endpoint, *LOAD_FLAGS, "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    (out / "stdout.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"the load generator exited with {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return json.loads((out / "serve-results.json").read_text())["runs"][0]


def check_load(endpoint: str, ours: dict, theirs: dict) -> Check:
    """Every request completed on both servers, with the same token totals."""
    wanted = int(LOAD_FLAGS[1])
    found = [f"{who}: {s['completed']}/{wanted} completed, errors {s['errors']}"
             for who, s in (("minillm", ours), ("vLLM", theirs)) if s["completed"] != wanted]
    for key in ("total_input_tokens", "total_output_tokens"):
        if ours[key] != theirs[key]:
            found.append(f"{key} {ours[key]} vs vLLM's {theirs[key]}")
    rows = [f"load generator, {endpoint} ({wanted} requests at once; the timings are one small "
            "burst on this machine now, not a benchmark):",
            f"  {'':<22}{'minillm':>12}{'vLLM':>12}"]
    rows += [f"  {key:<22}{fmt(ours.get(key)):>12}{fmt(theirs.get(key)):>12}"
             for key in SIDE_BY_SIDE]
    detail = "; ".join(found) if found else (
        f"{wanted}/{wanted} on both, same tokens in/out "
        f"{ours['total_input_tokens']}/{ours['total_output_tokens']} (side by side below)")
    return Check(f"load generator: {endpoint}", not found, detail, notes=rows)


def fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)
