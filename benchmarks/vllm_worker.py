"""Runs inside vLLM's own virtualenv: `python vllm_worker.py --model DIR ...`.

Started by `benchmarks.peers.VllmWorker`. It builds one vLLM engine (that takes
tens of seconds, so it happens once), prints a ready line, then answers one JSON
command per stdin line:

    {"cmd": "run", "prompts": [[ids], ...], "max_tokens": [n, ...]}
        → {"elapsed_s": s, "output_lens": [n, ...]}
    {"cmd": "quit"}

Replies are prefixed with a marker so vLLM's own log lines on stdout are ignored.
Only the standard library and vllm are imported: minillm is not installed there.
"""

import argparse
import json
import sys
import time

MARK = "@@bench@@ "


def reply(obj) -> None:
    sys.stdout.write(MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()

    import vllm
    from vllm import LLM, SamplingParams

    # Prefix caching off, as in minillm's engines: every round sends the same prompts, so
    # with it on a later round could skip prefills that minillm computes. (vLLM's CPU
    # blocks hold 128 tokens, more than these prompts, so it measured no difference:
    # docs/performance.md; off, the comparison does not depend on that.)
    llm = LLM(model=args.model, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
              max_model_len=2048, seed=0, enable_prefix_caching=False)
    reply({"ready": True, "version": vllm.__version__})
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        prompts = [{"prompt_token_ids": p} for p in command["prompts"]]
        params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
                  for n in command["max_tokens"]]
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        reply({"elapsed_s": elapsed, "output_lens": [len(o.outputs[0].token_ids) for o in outputs]})


if __name__ == "__main__":
    main()
