"""The parts of the check, in the order they run, and the time each may take.

A part runs in its own child process; when its guard runs out the whole process group
is killed and the part is reported as failed ("took longer than N s"), and the next
part starts. The guards are maxima, not estimates: the sum of the GPU guards is above the
overall budget, which is enforced too (a part gets min(its guard, the time left)).

The order puts the parts that need no model first, so a run that has the kernels but
not yet the model (an offline machine whose model arrives in a second call, see
scripts/gpu_carry.sh) does everything it can with `--only` those.
"""

from __future__ import annotations

from dataclasses import dataclass

# Seconds for all parts together, after set-up. The GPU number is the 8 minutes.
BUDGET_S = {"gpu": 480, "cpu": 600}


@dataclass(frozen=True)
class Part:
    name: str
    what: str
    gpu_guard_s: int
    cpu_guard_s: int
    needs_model: bool            # GPU mode: SmolLM2-135M must be loadable (cache or GGUF);
                                 # the CPU mode measures on the tiny random Llama instead

    def guard_s(self, mode: str) -> int:
        return self.gpu_guard_s if mode == "gpu" else self.cpu_guard_s


PARTS = (
    Part("environment", "versions vs pins, device and dtype choice, imports", 60, 60, False),
    Part("kernel_tests", "Triton kernels vs PyTorch references (pytest)", 150, 120, False),
    Part("kernel_bench", "kernels' achieved bandwidth vs measured copy bandwidth", 90, 90, False),
    Part("oracle", "engine greedy tokens = transformers, every mode (pytest)", 120, 60, True),
    Part("lessons", "lessons 06 and 07 top to bottom (nbclient)", 180, 60, True),
    Part("capstone", "lesson 13's engine from solutions/ with the ex07 Triton kernel vs "
         "transformers", 90, 30, True),
    Part("decode_curve", "decode tokens/s vs batch, beside the roofline", 60, 90, True),
    Part("throughput", "continuous vs static on the skewed workload", 120, 120, True),
    Part("chunked", "P99 ITL and TTFT, chunked vs unchunked prefill", 75, 120, True),
)
BY_NAME = {p.name: p for p in PARTS}
ALWAYS = ("environment",)        # the others read what it finds (is there a model?)


def choose(only: str | None, skip: str | None) -> tuple[list[str], dict[str, str]]:
    """The parts to run and, for the others, why not. Unknown names are a ValueError."""
    names = [p.name for p in PARTS]
    wanted = _names(only, names) if only else list(names)
    unwanted = _names(skip, names) if skip else []
    chosen, left_out = [], {}
    for name in names:
        if name in ALWAYS or (name in wanted and name not in unwanted):
            chosen.append(name)
        else:
            left_out[name] = "not selected (--only/--skip)"
    return chosen, left_out


def _names(text: str, known: list[str]) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; choose from {', '.join(known)}")
    return names
