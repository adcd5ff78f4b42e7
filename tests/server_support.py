"""Shared by the real-model server tests: one `minillm serve` for the whole session
(started on 127.0.0.1 and a free port, stopped by process group even when a test fails;
it runs the readable engine, `--executor eager`, so the server tests check it beside the
offline `LLM`, which runs the default executor),
the official `openai` client, and a check after every test that the server is idle with
every KV block free."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from minillm.serving.launcher import ServerProcess

KEY = "test-key"
MODEL = "smollm2-135m"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a small robot"]
QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]
HEADERS = {"Authorization": f"Bearer {KEY}"}


def scrape(server) -> dict[str, float]:
    """`/metrics` as {name: value} for the unlabelled-by-reason series."""
    values = {}
    for line in httpx.get(server.url("/metrics"), timeout=10).text.splitlines():
        if line.startswith("minillm:") and "finished_reason" not in line:
            name, value = line.split("{")[0], float(line.rsplit(" ", 1)[1])
            values[name] = value
    return values


def wait_until_idle(server, timeout=30.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(server)
        idle = (m["minillm:kv_cache_free_blocks"] == m["minillm:kv_cache_total_blocks"]
                and m["minillm:num_requests_running"] == 0
                and m["minillm:num_requests_waiting"] == 0)
        if idle or time.monotonic() > deadline:
            return m
        time.sleep(0.05)


@pytest.fixture(scope="session")
def server():
    proc = ServerProcess("--max-num-seqs", "8", "--api-key", KEY, "--executor", "eager")
    try:
        yield proc.start()
    finally:
        proc.stop()


@pytest.fixture(autouse=True)
def all_blocks_free_after_each_test(request):
    yield
    if "server" in request.fixturenames:
        server = request.getfixturevalue("server")
        m = wait_until_idle(server)
        assert m["minillm:kv_cache_free_blocks"] == m["minillm:kv_cache_total_blocks"], m
        assert m["minillm:num_requests_running"] == m["minillm:num_requests_waiting"] == 0, m


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=server.url("/v1"), api_key=KEY, max_retries=0,
                       timeout=300) as c:
        yield c
