"""One streamed request, timed at the client — where the user is.

The server can time a request from the moment its handler saw it to the moment the
engine produced a token; the user waits for more than that: the connection, the request
upload, JSON parsing on both sides, the HTTP framing, and the client's own event loop.
So a serving benchmark measures at the client, from just before the request is sent:

    TTFT   first chunk that carries text              − send time
    ITL    gap between consecutive text chunks        (every gap of every request)
    TPOT   (last chunk − first chunk) / (tokens − 1)  per request; tokens from `usage`
    E2EL   end of the stream                          − send time

(vLLM's `vllm bench serve` uses the same definitions, which is why its result names
are used here.) Token counts come from the usage chunk the server sends when asked with
`stream_options: {"include_usage": true}`, not from counting chunks: a chunk may carry
several tokens, or none.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field


@dataclass
class RequestResult:
    index: int
    success: bool = False
    error: str = ""
    start: float = 0.0               # perf_counter just before sending
    ttft: float = 0.0                # seconds
    latency: float = 0.0             # E2E, seconds
    itl: list[float] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)   # seconds since start
    prompt_tokens: int = 0
    output_tokens: int = 0
    response_id: str = ""
    text: str = ""

    @property
    def tpot(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


def chunk_text(chunk: dict) -> str:
    """The text a completion or chat chunk carries ('' for role-only or usage chunks)."""
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "text" in choice:
        return choice["text"] or ""
    return (choice.get("delta") or {}).get("content") or ""


async def stream_request(http, url: str, payload: dict, index: int,
                         headers: dict | None = None) -> RequestResult:
    """POST `payload` (with "stream": true) and time every chunk of the answer."""
    result = RequestResult(index)
    result.start = time.perf_counter()
    pieces = []
    try:
        async with http.stream("POST", url, json=payload, headers=headers) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                result.error = f"HTTP {response.status_code}: {body[:300]}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue                       # blank separators, SSE comments
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    result.error = f"error event: {chunk['error'].get('message')}"
                    return result
                now = time.perf_counter() - result.start
                result.response_id = result.response_id or chunk.get("id", "")
                text = chunk_text(chunk)
                if text:
                    if result.chunk_times:
                        result.itl.append(now - result.chunk_times[-1])
                    result.chunk_times.append(now)
                    pieces.append(text)
                if chunk.get("usage"):
                    result.prompt_tokens = chunk["usage"].get("prompt_tokens", 0)
                    result.output_tokens = chunk["usage"].get("completion_tokens", 0)
    except Exception as error:                     # network errors, timeouts, bad JSON
        result.error = f"{type(error).__name__}: {error}"
        return result
    result.latency = time.perf_counter() - result.start
    result.text = "".join(pieces)
    if not result.chunk_times:
        result.error = "the stream ended without any text"
        return result
    result.ttft = result.chunk_times[0]
    result.output_tokens = result.output_tokens or len(result.chunk_times)
    result.success = True
    return result
