"""The terminal smoke command answers like transformers' own greedy generate."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

PROMPT = "Write a short story about a robot who learns to paint."


@pytest.mark.model
def test_generate_command_equals_transformers_greedy(smollm2):
    hf, tokenizer = smollm2
    run = subprocess.run([sys.executable, "-m", "minillm", "generate", PROMPT,
                          "--max-tokens", "48"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "tokens/s" in run.stderr

    text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                         add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = hf.generate(ids, max_new_tokens=48, do_sample=False)
    new_tokens = out[0, ids.shape[1]:]
    assert len(new_tokens) >= 32
    expected = tokenizer.decode(new_tokens, skip_special_tokens=True)
    assert run.stdout.strip() == expected.strip()


@pytest.mark.unit
def test_generate_command_reports_bad_model_clearly():
    run = subprocess.run([sys.executable, "-m", "minillm", "generate", "hi", "--model",
                          "no-such-model"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "smollm2-135m" in run.stderr and "Traceback" not in run.stderr
