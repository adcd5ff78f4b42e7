"""Every kind of bad request gets its 4xx with an OpenAI-style error that names the field,
and the next good request is served; the API key is enforced on /v1/*."""

from __future__ import annotations

import httpx
import openai
import pytest
from server_support import (HEADERS, KEY, MODEL, QUESTION,  # noqa: F401
                            all_blocks_free_after_each_test, client, server)

pytestmark = pytest.mark.model


BAD = [  # (path, body or raw bytes, status, param named in the error)
    ("/v1/completions", b"{not json", 400, None),
    ("/v1/completions", b"[1, 2]", 400, None),
    ("/v1/completions", {"model": "gpt-4", "prompt": "hi"}, 404, "model"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"max_tokens": 5}, 400, "prompt"),
    ("/v1/completions", {"prompt": "hi " * 9000}, 400, "prompt"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 10 ** 6}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "temperature": -0.5}, 400, "temperature"),
    ("/v1/completions", {"prompt": "hi", "top_p": 1.5}, 400, "top_p"),
    ("/v1/completions", {"prompt": "hi", "top_k": -3}, 400, "top_k"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "8"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": [1, 99999999]}, 400, "prompt"),
    ("/v1/completions", {"prompt": "hi", "n": 3}, 422, "n"),
    ("/v1/completions", {"prompt": "hi", "stop": ["."]}, 422, "stop"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 5}, 422, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "frobnicate": True}, 400, "frobnicate"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, 400,
     "messages.0.role"),
    ("/v1/chat/completions", {"messages": QUESTION, "max_completion_tokens": -1}, 400,
     "max_completion_tokens"),
    ("/v1/completions", b"x" * (5 * 1024 * 1024), 413, None),
]


@pytest.mark.parametrize("path,body,status,param", BAD,
                         ids=[f"{i}-{s}-{p}" for i, (_, _, s, p) in enumerate(BAD)])
def test_a_bad_request_gets_its_4xx_and_the_next_one_is_served(server, client, path, body,
                                                               status, param):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(server.url(path), headers=HEADERS, timeout=60, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]
    good = client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, temperature=0)
    assert good.usage.completion_tokens == 2


def test_wrong_or_missing_api_key_is_401_and_open_paths_stay_open(server):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = httpx.post(server.url("/v1/completions"), json={"prompt": "hi"},
                              headers=headers, timeout=30)
        assert response.status_code == 401
        assert "Authorization: Bearer" in response.json()["error"]["message"]
    with openai.OpenAI(base_url=server.url("/v1"), api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    assert httpx.get(server.url("/health")).status_code == 200
    assert httpx.get(server.url("/metrics")).status_code == 200
