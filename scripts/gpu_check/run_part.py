"""One part of the check, in its own process: `python -m gpu_check.run_part NAME MODE WORK`.

It calls the part's function with a `Context` and writes what it returns to
`WORK/NAME.json`. A part returns

    {"checks": [{"name": ..., "status": "passed" | "failed" | "skipped", "reason": ...}],
     "data": {...every number...}, "targets": [...], "headline": {...}}

An exception becomes a failed check carrying the end of the traceback, so the driver
always learns why.
"""

from __future__ import annotations

import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Context:
    mode: str                     # "gpu" or "cpu"
    work: Path                    # scratch folder shared by the parts (JUnit, PNGs, notebooks)
    repo: Path = REPO

    @property
    def gpu(self) -> bool:
        return self.mode == "gpu"


def functions() -> dict:
    from gpu_check import checks, measure
    return {"environment": checks.environment, "kernel_tests": checks.kernel_tests,
            "oracle": checks.oracle, "lessons": checks.lessons, "capstone": checks.capstone,
            "kernel_bench": measure.kernel_bench, "decode_curve": measure.decode_curve,
            "throughput": measure.throughput, "chunked": measure.chunked}


def main(argv: list[str]) -> int:
    name, mode, work = argv
    context = Context(mode, Path(work))
    try:
        result = functions()[name](context)
    except Exception:  # noqa: BLE001 - any failure must reach the summary, with its cause
        text = traceback.format_exc()
        print(text, file=sys.stderr)
        result = {"checks": [{"name": name, "status": "failed", "reason": text.strip().splitlines()[-1],
                              "traceback": text[-4000:]}]}
    (context.work / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
