"""The terminal smoke command answers like transformers' own greedy generate."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

PROMPT = "Write a short story about a robot who learns to paint."


@pytest.mark.model
@pytest.mark.parametrize("executor", ["auto", "eager"])
def test_generate_command_equals_transformers_greedy(smollm2, executor):
    hf, tokenizer = smollm2
    run = subprocess.run([sys.executable, "-m", "minillm", "generate", PROMPT,
                          "--max-tokens", "48", "--executor", executor],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "tokens/s" in run.stderr
    if executor == "eager":
        assert "executor eager" in run.stderr

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


@pytest.mark.unit
@pytest.mark.parametrize("flags,words", [
    (["--max-tokens", "0"], "--max-tokens must be >= 1"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--temperature", "nan"], "--temperature must be a finite"),
    (["--attention-backend", "flash"], "--attention-backend must be one of"),
    (["--model", "no-such-model"], "smollm2-135m"),
])
def test_generate_flags_are_checked_before_the_model_loads(tmp_path, flags, words):
    """An empty model cache: loading would start a ~20 s conversion into it. A bad flag
    must fail first, leaving the cache untouched."""
    env = {**__import__("os").environ, "MINILLM_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "minillm", "generate", "hi", *flags],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.unit
@pytest.mark.parametrize("flags,words", [
    (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be >= 1"),
    (["--max-model-len", "1"], "--max-model-len must be >= 2"),
    (["--num-kv-blocks", "0"], "--num-kv-blocks must be >= 1"),
    (["--scheduling", "static", "--enable-chunked-prefill"], "--enable-chunked-prefill needs"),
    (["--attention-backend", "flash"], "--attention-backend must be one of"),
    (["--executor", "turbo"], "--executor: invalid choice"),
    (["--block-size", "0"], "--block-size must be >= 1"),
    (["--model", "no-such-model"], "smollm2-135m"),
])
def test_serve_flags_are_checked_before_the_model_loads(tmp_path, flags, words):
    """Same rule for the server: a bad flag fails in seconds, naming the flag, before the
    model cache is touched or a port is bound."""
    env = {**__import__("os").environ, "MINILLM_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "minillm", "serve", "--port", "0", *flags],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr
    assert "listening" not in run.stdout and not (tmp_path / "cache").exists()


@pytest.mark.unit
def test_the_engine_flags_are_made_from_engine_config():
    """Every knob is declared once, in EngineConfig: each command-line field has exactly
    one flag on `serve` and `generate`, named as the field says, with its default."""
    from dataclasses import fields

    from minillm.config import EngineConfig
    from minillm.serving.args import build_parser, flag_name, parse_args
    serve = {o: a for a in build_parser()._actions for o in a.option_strings}
    for field in fields(EngineConfig):
        on_cli = field.metadata.get("cli", True)
        assert (flag_name(field) in serve) == on_cli, field.name
        if on_cli:
            assert serve[flag_name(field)].dest == field.name
            assert serve[flag_name(field)].default == field.default
    assert flag_name(next(f for f in fields(EngineConfig) if f.name == "policy")) \
        == "--scheduling-policy"
    args = parse_args(["--scheduling-policy", "priority", "--executor", "eager",
                       "--enable-prefix-caching", "--speculative-config",
                       '{"method": "ngram", "num_speculative_tokens": 3}'])
    assert args.engine_config == EngineConfig(policy="priority", executor="eager",
                                              enable_prefix_caching=True, speculative_config={
                                                  "method": "ngram", "num_speculative_tokens": 3})


@pytest.mark.unit
@pytest.mark.parametrize("flags,words", [
    (["--max-num-seqs", "0"], "--max-num-seqs: must be >= 1"),
    (["--threads", "two"], "--threads: 'two' is not an int"),
    (["--vllm-python", "/nonexistent/python"], "--vllm-python"),
])
def test_bench_flags_are_checked_first(flags, words):
    run = subprocess.run([sys.executable, "-m", "benchmarks", *flags],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and words in run.stderr


@pytest.mark.unit
@pytest.mark.parametrize("lesson", ["1x", "123", "02abc", "00", "ex", "2 3"])
def test_grading_refuses_anything_but_exactly_one_lesson(lesson):
    run = subprocess.run([sys.executable, "-m", "minillm.grading", lesson],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "is not one lesson" in run.stderr


@pytest.mark.unit
@pytest.mark.parametrize("args,words", [
    (["01", "--out", "/nonexistent/x.csv"], "does not exist"),
    (["01", "--out", "grades.txt"], "must end in .csv or .json"),
    (["01", "--all"], "not both"),
])
def test_grading_checks_its_flags_before_grading(args, words):
    run = subprocess.run([sys.executable, "-m", "minillm.grading", *args],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr


@pytest.mark.unit
@pytest.mark.parametrize("flags,words", [
    (["--only", ","], "names no experiment"),
    (["--out", "/etc/passwd"], "is a file"),
    (["--model", "nope"], "--model: Unknown model"),
])
def test_more_bench_flags_are_checked_first(flags, words):
    run = subprocess.run([sys.executable, "-m", "benchmarks", *flags],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr


@pytest.mark.unit
@pytest.mark.parametrize("feature", ["--enable-chunked-prefill", "--enable-prefix-caching"])
def test_serve_takes_the_scheduling_its_error_suggests(capsys, feature):
    """`--scheduling static` with a paged-only feature fails and suggests two values;
    following either suggestion works (the flag once offered only continuous/static)."""
    from minillm.serving.args import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--scheduling", "static", feature])
    advice = capsys.readouterr().err
    for suggested in ("continuous", "static+paged"):
        assert f"'{suggested}'" in advice
        assert parse_args(["--scheduling", suggested, feature]).scheduling == suggested
