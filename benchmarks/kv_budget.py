"""How many sequences a fixed KV budget holds at once: contiguous vs paged.

Clients send a generous `max_tokens` ("just in case") while real answers are mostly
short. A contiguous reservation must hold prompt + `max_tokens` per request from its
first step; paging holds only what has been generated so far, block by block. With
the same budget, paging fits several times more sequences.

Simulator: the real schedulers and block manager decide who runs and who holds which
block; only the clock is modelled. `max_num_seqs` is set high so that memory, not
batch slots, is the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.common import figure, num, pct, save, table, workload_stats
from minillm.sim.metrics import summarize
from minillm.sim.simulate import simulate
from minillm.sim.workload import lognormal, make_workload, pareto
from minillm.widgets.style import COLORS


@dataclass(frozen=True)
class BudgetShape:
    """One KV budget and the requests that compete for it."""

    budget_blocks: int = 256
    block_size: int = 16
    max_tokens: int = 512            # what every client sends; answers are Pareto, capped here
    num_requests: int = 128          # prompts lognormal (median 48, capped at max_tokens / 2)


FULL_BUDGET = BudgetShape()
QUICK_BUDGET = BudgetShape(budget_blocks=48, max_tokens=128, num_requests=24)


def planned_runs(config) -> int:
    return 1


def run(bench) -> dict:
    """Static (contiguous) and continuous (paged) on the same workload and budget."""
    shape = QUICK_BUDGET if bench.config.quick else FULL_BUDGET
    cap = shape.max_tokens
    specs = make_workload(shape.num_requests, lognormal(48, 0.5, cap=cap // 2),
                          pareto(8, 1.0, cap=cap), max_tokens=None, seed=bench.config.seed)
    out = {"budget_blocks": shape.budget_blocks, "block_size": shape.block_size,
           "budget_tokens": shape.budget_blocks * shape.block_size, "max_tokens_sent": cap,
           "workload": workload_stats(specs), "runner": "simulator"}
    for name in ("static", "continuous"):
        trace = simulate(specs, scheduling=name, max_num_seqs=256,
                         num_kv_blocks=shape.budget_blocks, block_size=shape.block_size)
        holding = [len(s.scheduled) + len(s.idle) for s in trace.steps]   # [steps]
        s = summarize(trace)
        out[name] = {"max_concurrent": max(holding), "mean_concurrent": sum(holding) / len(holding),
                     "kv_waste": s["kv_waste"], "preemptions": s["preemptions"],
                     "num_steps": s["num_steps"]}
    bench.tick("kv_budget", 0)
    return out


def text(r: dict) -> str:
    st, co = r["static"], r["continuous"]
    head = (f"Fixed KV budget — {r['budget_tokens']:,} token slots ({r['budget_blocks']} blocks "
            f"of {r['block_size']}), {r['workload']['num_requests']} requests sending "
            f"max_tokens={r['max_tokens_sent']}; simulator (real schedulers and block manager)")
    rows = [["max concurrent sequences", st["max_concurrent"], co["max_concurrent"]],
            ["mean concurrent sequences", num(st["mean_concurrent"]), num(co["mean_concurrent"])],
            ["KV waste (reserved, empty)", pct(st["kv_waste"]), pct(co["kv_waste"])],
            ["preemptions", st["preemptions"], co["preemptions"]]]
    gain = co["max_concurrent"] / max(st["max_concurrent"], 1)
    return "\n".join([head, table(["", "contiguous (static)", "paged (continuous)"], rows),
                      f"paged / contiguous max concurrent: {gain:.1f}×"])


def plot(r: dict, path) -> None:
    """Max concurrent sequences and KV waste, contiguous vs paged."""
    fig, (ax1, ax2) = figure(2, width=4.2)
    names = ["contiguous\n(static)", "paged\n(continuous)"]
    colors = [COLORS["static"], COLORS["continuous"]]
    ax1.bar(names, [r["static"]["max_concurrent"], r["continuous"]["max_concurrent"]], color=colors)
    ax1.set_ylabel("max concurrent sequences")
    ax1.set_title(f"{r['budget_tokens']:,}-token KV budget (simulator)")
    ax2.bar(names, [100 * r["static"]["kv_waste"], 100 * r["continuous"]["kv_waste"]], color=colors)
    ax2.set_ylabel("KV reserved but empty (%)")
    ax2.set_title("KV waste")
    save(fig, path)
