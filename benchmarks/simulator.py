"""How fast the simulator runs: wall time for a thousand chat requests.

The widgets re-simulate a workload every time a slider moves, so the simulator must
take a fraction of a second for a thousand requests. Printed: requests, engine steps,
simulated seconds, wall seconds and steps per second of wall time.
"""

from __future__ import annotations

import time

from minillm.sim.simulate import simulate
from minillm.sim.workload import preset_workload

FULL_REQUESTS = 1000
QUICK_REQUESTS = 200


def planned_runs(config) -> int:
    return 1


def run(bench) -> dict:
    """Continuous batching on `FULL_REQUESTS` Poisson chat requests, timed once."""
    n = QUICK_REQUESTS if bench.config.quick else FULL_REQUESTS
    specs = preset_workload("chat", n, arrival="poisson", rate=20.0, seed=bench.config.seed)
    start = time.perf_counter()
    trace = simulate(specs, scheduling="continuous", max_num_seqs=16)
    wall = time.perf_counter() - start
    bench.tick("simulator", 0)
    return {"num_requests": n, "num_steps": len(trace.steps), "wall_s": wall,
            "simulated_s": trace.duration, "steps_per_s": len(trace.steps) / wall}


def text(r: dict) -> str:
    return (f"Simulator — {r['num_requests']} requests, {r['num_steps']:,} steps "
            f"({r['simulated_s']:.0f} s simulated) in {r['wall_s']:.2f} s of wall time "
            f"({r['steps_per_s']:,.0f} steps/s)")


plot = None                          # one number: nothing to draw
