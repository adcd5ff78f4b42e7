"""Two checkouts of minillm on the peers workload, alternating, in fresh processes.

    python scripts/experiments/before_after.py /path/to/old/checkout . --rounds 3 [--knobs '{"max_num_seqs": 16}']

Each round runs every checkout once, in a subprocess whose `PYTHONPATH` puts that
checkout first, through the public API only (`LLM(...).generate`), so any two versions
compare whatever their internals: 64 chat prompts, the peers bench's lognormal output
lengths, EOS ignored, 16 at a time, fp32, 2 threads (`benchmarks/peers.py`'s workload,
built here from the same seeds). Printed: tokens/s per checkout and round, the median,
and the median of per-round ratios against the first checkout; the generated tokens
must be the same in every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""
    import json, sys, time, torch
    torch.set_num_threads(2)
    from minillm import LLM, SamplingParams
    knobs = json.loads(sys.argv[1])
    prompts, lengths = json.loads(sys.argv[2]), json.loads(sys.argv[3])
    llm = LLM("smollm2-135m", max_num_seqs=16, **knobs)
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
    requests = [{"prompt_token_ids": p} for p in prompts]
    llm.generate(requests[:16], [SamplingParams(max_tokens=2, ignore_eos=True)] * 16,
                 use_tqdm=False)                                  # warm-up
    start = time.perf_counter()
    outs = llm.generate(requests, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    tokens = [o.outputs[0].token_ids for o in outs]
    import minillm
    print(json.dumps({"tokens_per_s": sum(map(len, tokens)) / elapsed,
                      "config": {k: llm.llm_engine.config.get(k)
                                 for k in ("executor", "attention_backend")},
                      "package": minillm.__file__, "tokens": tokens}))
""")


def workload() -> tuple[list[list[int]], list[int]]:
    """The peers bench's prompts and output lengths (this checkout's benchmarks/)."""
    from benchmarks.peers import FULL_PEERS, peer_output_lengths, peer_prompts
    from minillm.model.loader import load_model_and_tokenizer
    _, tokenizer = load_model_and_tokenizer("smollm2-135m")
    return peer_prompts(tokenizer, FULL_PEERS), peer_output_lengths(FULL_PEERS)


def run(checkout: str, knobs: dict, prompts, lengths) -> dict:
    folder = str(Path(checkout).resolve())         # first on the path: `-c` puts the cwd there
    env = dict(os.environ, PYTHONPATH=folder, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(knobs), json.dumps(prompts),
                           json.dumps(lengths)], capture_output=True, text=True, env=env,
                          cwd=folder, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs=2, help="two folders holding a minillm/ package")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--knobs", default="{}", help="LLM(...) keywords, as JSON, for both")
    args = parser.parse_args()
    prompts, lengths = workload()
    results = {c: [] for c in args.checkouts}
    for r in range(args.rounds):
        order = args.checkouts if r % 2 == 0 else args.checkouts[::-1]
        for checkout in order:
            results[checkout].append(run(checkout, json.loads(args.knobs), prompts, lengths))
            last = results[checkout][-1]
            print(f"round {r + 1} {checkout}: {last['tokens_per_s']:.1f} tokens/s "
                  f"{last['config']} ({last['package']})", flush=True)
    first, second = args.checkouts
    same = all(x["tokens"] == results[first][0]["tokens"] for c in args.checkouts
               for x in results[c])
    ratios = [b["tokens_per_s"] / a["tokens_per_s"] for a, b in zip(results[first], results[second])]
    for c in args.checkouts:
        print(f"{c}: median {statistics.median(x['tokens_per_s'] for x in results[c]):.1f} tokens/s")
    print(f"{second} / {first}: {statistics.median(ratios):.3f}× (per round: "
          f"{' '.join(f'{x:.3f}' for x in ratios)}); same tokens in every run: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
