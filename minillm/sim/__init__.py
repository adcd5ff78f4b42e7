"""The simulator and the measures: the same engine, with a cost model in place of the model.

    simulate.py     make_sim_engine / simulate: the real scheduler and engine, simulated steps
    sim_runner.py   SimRunner and its CostModel (how long a step takes)
    calibrate.py    fit a CostModel to steps timed on the real model
    workload.py     seeded workloads: arrivals, prompt and output lengths
    length_dist.py  the length distributions workloads draw from
    metrics.py      TTFT, TPOT, ITL, goodput, slot and KV use — from a Trace
"""
