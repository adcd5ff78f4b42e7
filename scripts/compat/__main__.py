"""`make compat`: does what the course says about vLLM hold for the vLLM installed?

    .venv/bin/python -m compat --vllm-python ~/.cache/minillm/vllm-venv/bin/python
    (run from scripts/, or with scripts/ on PYTHONPATH; `bash scripts/compat.sh` does both)

Four kinds of claims, each read from the course's own files and checked against vLLM's
CPU build in its own virtualenv:

1. the vLLM virtualenv imports vllm;
2. **scripts run unchanged** — each lesson function marked `# runs on vLLM unchanged`
   runs on both engines, with the same greedy texts (`scripts_check.py`);
3. **flags are real** — every vLLM flag the lessons, the README and `minillm serve`
   name is one of vLLM's (`flags.py`);
4. **the server speaks the same API** — the same requests to `python -m minillm serve`
   and to vLLM's server give answers of the same shape, usage and text, and the course's
   load generator drives both (`api.py`).

The result is one table (check, PASS/FAIL, detail); the exit status is 1 if any check
failed. Each check can be seen failing on purpose: `--bogus-flag=--max-num-seqz` adds a
flag to lesson 10's knob map, `--drop-field=usage.total_tokens` removes a field from
minillm's answers, `--edit-script="block_size=32=>block_size=16"` changes the lesson's
script before it runs. `--only flags,scripts,api` runs a part.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compat import flags, notebooks, scripts_check
from compat.report import Check, failed, table
from compat.servers import vllm_env

REPO = Path(__file__).resolve().parents[2]
PARTS = ("flags", "scripts", "api")
MARK = "@@compat@@ "


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="make compat", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vllm-python", default=os.environ.get("MINILLM_VLLM_PYTHON"),
                   required="MINILLM_VLLM_PYTHON" not in os.environ,
                   help="the Python of vLLM's virtualenv (or $MINILLM_VLLM_PYTHON)")
    p.add_argument("--only", default=",".join(PARTS),
                   help=f"comma-separated parts among {','.join(PARTS)} (default: all)")
    p.add_argument("--out", default=None, help="folder for the logs (default: a temp folder)")
    p.add_argument("--bogus-flag", action="append", default=[],
                   help="pretend lesson 10's knob map names this vLLM flag (to see a FAIL)")
    p.add_argument("--drop-field", action="append", default=[],
                   help="remove this field (e.g. usage.total_tokens) from minillm's answers")
    p.add_argument("--edit-script", action="append", default=[],
                   help="OLD=>NEW: change the lesson's script before it runs on both engines")
    args = p.parse_args(argv)
    args.parts = [x for x in args.only.split(",") if x]
    if bad := set(args.parts) - set(PARTS):
        p.error(f"--only: unknown part(s) {sorted(bad)}; choose among {PARTS}")
    try:
        args.edits = [tuple(e.split("=>", 1)) for e in args.edit_script]
        assert all(len(e) == 2 for e in args.edits)
    except AssertionError:
        p.error("--edit-script takes OLD=>NEW")
    return args


def model_dir() -> Path:
    """The Hugging Face folder minillm converted (what vLLM loads), made if missing."""
    from benchmarks.serve.workload import model_folder
    return model_folder("smollm2-135m")


def ask_vllm(python: str, job: dict, log_path: Path, timeout: float = 1200) -> dict:
    """Run `vllm_side.py` in vLLM's virtualenv with one job; its answer."""
    side = Path(__file__).with_name("vllm_side.py")
    with open(log_path, "w") as log:
        done = subprocess.run([python, str(side)], input=json.dumps(job), stdout=subprocess.PIPE,
                              stderr=log, text=True, env=vllm_env(), timeout=timeout)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"vllm_side.py exited with {done.returncode} without an answer; "
                       f"see {log_path}")


def say(message: str) -> None:
    """A progress line: the whole run takes minutes."""
    print(f"compat: {message}", flush=True)


def vllm_row(python: str) -> Check:
    from benchmarks.peers import vllm_status
    reason = vllm_status(python)
    if reason:
        return Check("vLLM virtualenv", False, reason)
    version = subprocess.run([python, "-c", "import vllm, torch; print(vllm.__version__, "
                              "torch.__version__)"], capture_output=True, text=True,
                             env=vllm_env()).stdout.split()
    return Check("vLLM virtualenv", True, f"vllm {version[0]} with torch {version[1]} in {python}")


def run(args) -> list[Check]:
    out = Path(args.out or tempfile.mkdtemp(prefix="minillm-compat-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = [vllm_row(args.vllm_python)]
    if not rows[0].passed:
        return rows
    folder = model_dir()
    lessons = REPO / "lessons"
    claims = notebooks.vllm_flag_claims(lessons) + notebooks.readme_flag_claims(REPO / "README.md")
    claims += [notebooks.FlagClaim(f, "10_beyond", "injected", "serve", True) for f in args.bogus_flag]
    argv_claims = notebooks.vllm_argv_claims(lessons)
    server = flags.server_flags()
    scripts, minillm_texts = [], {}
    if "scripts" in args.parts:
        scripts = [scripts_check.edited(s, args.edits) for s in notebooks.marked_scripts(lessons)]
        if not scripts:
            rows.append(Check("scripts run unchanged", False,
                              f"no code cell is marked {notebooks.MARKER!r}"))
        for script in scripts:
            say(f"running {script.lesson}.{script.function} on minillm")
            minillm_texts[script.function] = scripts_check.run_on_minillm(script)
    argvs = [list(c.argv) for c in argv_claims] + flags.server_argvs(server)
    job = {"parsers": "flags" in args.parts, "argvs": argvs if "flags" in args.parts else [],
           "model": str(folder),
           "scripts": [{"code": s.code, "function": s.function, "model": str(folder)}
                       for s in scripts]}
    if job["parsers"] or job["scripts"]:
        say("asking vLLM's parsers" * job["parsers"] + " and " * bool(job["parsers"] and scripts)
            + "running the scripts on vLLM" * bool(scripts))
        try:
            answer = ask_vllm(args.vllm_python, job, out / "vllm-side.log")
        except Exception as error:               # the table still shows what ran
            return rows + [failed("vLLM side (flags, scripts)", error)]
        rows += flag_rows(answer, claims, argv_claims, server) if job["parsers"] else []
        log = (out / "vllm-side.log").read_text(errors="replace")
        for script, result in zip(scripts, answer.get("scripts", {}).get("ok", [])):
            rows += scripts_check.check_script(script, minillm_texts[script.function], result, log)
    if "api" in args.parts:
        rows += api_rows(args, folder, out)
    print(f"logs: {out}")
    return rows


def flag_rows(answer, claims, argv_claims, server) -> list[Check]:
    if "error" in answer["parsers"]:
        return [failed("flags", answer["parsers"]["error"])]
    parsers = answer["parsers"]["ok"]
    argvs = [c.argv for c in argv_claims] + [tuple(a) for a in flags.server_argvs(server)]
    verdicts = dict(zip(argvs, answer["argvs"]["ok"]))
    return (flags.check_lessons(claims, argv_claims, parsers, verdicts)
            + [flags.check_server(server, parsers, verdicts)])


def api_rows(args, folder: Path, out: Path) -> list[Check]:
    """Both servers, one after the other (never both in memory): the same requests, then
    the load generator on each endpoint."""
    from compat import api
    from compat.servers import minillm_server, vllm_server
    collected = {}
    starts = {"minillm": lambda: minillm_server(out / "minillm-serve.log"),
              "vLLM": lambda: vllm_server(args.vllm_python, folder, out / "vllm-serve.log")}
    for who, start in starts.items():
        try:
            began = time.monotonic()
            with start() as url:
                say(f"{who} server up ({time.monotonic() - began:.0f} s); sending the requests, "
                    "then the load generator")
                collected[who] = {"answers": api.answers(url),
                                  "load": {e: api.load_run(url, e, out / f"load-{who}-{e}")
                                           for e in ("completions", "chat")}}
        except Exception as error:
            return [failed(f"API: {who} server", error)]
    ours, theirs = collected["minillm"], collected["vLLM"]
    (out / "answers.json").write_text(json.dumps(collected, indent=1, default=str))
    rows = api.check_answers(ours["answers"], theirs["answers"], args.drop_field)
    rows += [api.check_load(e, ours["load"][e], theirs["load"][e]) for e in ("completions", "chat")]
    return rows


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    start = time.monotonic()
    rows = run(args)
    print()
    print(table(rows))
    notes = [n for row in rows for n in row.notes]
    if notes:
        print("\n" + "\n".join(notes))
    bad = [r.name for r in rows if not r.passed]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} checks pass "
          f"({time.monotonic() - start:.0f} s)" + (f"; failing: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
