"""The engine loop and what it keeps per request.

    engine.py       LLMEngine: requests in, one scheduled step at a time, outputs out
    sequence.py     Sequence: one request's tokens, state and timestamps
    prompts.py      a prompt as a user gives it → token ids, with every check
    runner.py       Runner: what executes a step (the model, or the simulator), its clock
    speculative.py  prompt-lookup speculative decoding: propose and verify drafts
    trace.py        the per-step and per-request record every metric and widget reads
    checks.py       argument checks shared by every public entry point
    components.py   lesson 13: the engine built from the learner's exercise parts
    adapters.py     lesson 13: their adapters to the engine, each checked against the answer key
"""
