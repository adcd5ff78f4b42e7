"""`scripts/gpu_check.sh` in its CPU mode, end to end, so the GPU check cannot rot.

The GPU mode needs a GPU (docs/performance.md says how to run it on a lent one). The
CPU mode runs the same driver, the same parts and writes the same files, at toy sizes:
this test runs it into a temporary folder and reads what it wrote. Timings are never
looked at, only that each part ran and said what it did or why it skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from gpu_check import carry, plan  # noqa: E402

PASSED_ON_CPU = {"imports", "pins", "device_choice", "kernel_tests", "kernel_bench",
                 "lessons_kernel", "decode_curve", "throughput", "chunked"}
SKIPPED_ON_CPU = {"kernel_tests_full", "oracle", "lessons", "capstone"}
# What a lent GPU machine sends back: at most 8 files, names of letters, digits, . _ -
OUTPUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    env = dict(os.environ, PYTHON=sys.executable, HF_HUB_OFFLINE="1")
    done = subprocess.run(["bash", "scripts/gpu_check.sh", str(out), "--cpu"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    return out, done


@pytest.mark.kernels
def test_cpu_mode_runs_every_part_and_says_why_it_skips(cpu_run):
    out, done = cpu_run
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert "CPU MODE" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu" and summary["status"] == "passed"
    status = {c["name"]: c["status"] for c in summary["checks"]}
    assert {n for n, s in status.items() if s == "passed"} >= PASSED_ON_CPU, status
    assert {n for n, s in status.items() if s == "skipped"} >= SKIPPED_ON_CPU, status
    assert all(c["reason"] for c in summary["checks"]), "every check says why"
    assert set(summary["parts"]) == {p.name for p in plan.PARTS}
    assert summary["engine_default"]["engine_device"] == "cpu"
    assert summary["targets"] and all(t["met"] is None for t in summary["targets"])


@pytest.mark.kernels
def test_cpu_mode_output_files_fit_what_a_lent_machine_returns(cpu_run):
    out, _ = cpu_run
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(json.loads((out / "summary.json").read_text())["files"])
    assert len(files) <= 8 and all(p.is_file() and OUTPUT_NAME.match(p.name) for p in out.iterdir())
    suites = ET.parse(out / "junit.xml").getroot()
    assert suites.tag == "testsuites" and len(list(suites.iter("testcase"))) > 10
    with zipfile.ZipFile(out / "plots.zip") as plots:
        assert {"kernels.png", "decode_curve.png", "throughput.png", "chunked.png"} <= set(plots.namelist())


@pytest.mark.kernels
def test_cpu_mode_numbers_reach_results_json(cpu_run):
    out, _ = cpu_run
    results = json.loads((out / "results.json").read_text())
    kernels = results["kernel_tests"]["data"]
    assert kernels["passed"] > 10 and kernels["failed"] == 0
    assert [r["batch"] for r in results["decode_curve"]["data"]["rows"]] == [1, 2, 4]
    assert results["kernel_bench"]["data"]["store_kv"][0]["exact"]
    ideal = results["throughput"]["data"]["step_count_ideal"]
    assert ideal["static_steps"] > ideal["continuous_steps"] > 0   # 12 requests, 4 slots
    assert "itl_p99" in results["chunked"]["data"]["ratios"]


@pytest.mark.unit
def test_unknown_part_names_are_refused():
    chosen, left_out = plan.choose("kernel_tests", None)
    assert chosen == ["environment", "kernel_tests"] and "oracle" in left_out
    with pytest.raises(ValueError, match="unknown part"):
        plan.choose("kernel_test", None)


@pytest.mark.unit
def test_carried_model_parts_are_joined_and_checked(tmp_path):
    data = bytes(range(256)) * 4
    model = tmp_path / "carry" / "model"
    model.mkdir(parents=True)
    manifest = {"file": "m.gguf", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                "parts": ["m.gguf.part1", "m.gguf.part2"]}
    (model / "MANIFEST.json").write_text(json.dumps(manifest))
    (model / "m.gguf.part1").write_bytes(data[:600])
    site = tmp_path / "site"
    assert carry.stage_model(tmp_path / "carry", site)["model"].startswith("incomplete: 1 of 2")
    (model / "m.gguf.part2").write_bytes(data[600:-1] + bytes([data[-1] ^ 1]))   # one bit off
    with pytest.raises(RuntimeError, match="sha256"):
        carry.stage_model(tmp_path / "carry", site)
    (model / "m.gguf.part2").write_bytes(data[600:])
    assert carry.stage_model(tmp_path / "carry", site)["model"] == "assembled"
    assert (site / carry.MODEL_PACKAGE / "m.gguf").read_bytes() == data
    assert (site / carry.MODEL_PACKAGE / "__init__.py").is_file()
    assert carry.stage_model(tmp_path / "carry", site)["model"] == "ready"
