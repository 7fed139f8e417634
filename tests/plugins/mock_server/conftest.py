from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import pytest
from attrs import frozen

from dsh.testing.mockserver import MockServer


@frozen
class Answer:
    status: int
    text: str
    headers: Mapping[str, str]

    def error(self) -> str:
        """The message of a DeepSeek error body."""
        message: str = json.loads(self.text)["error"]["message"]
        return message


Post = Callable[..., Awaitable[Answer]]


def chat(messages: list[Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A request body: one user message by default, streaming, model deepseek-flash."""
    body: dict[str, Any] = {
        "model": "deepseek-flash",
        "messages": [{"role": "user", "content": "hi"}] if messages is None else messages,
        "stream": True,
    }
    body.update(fields)
    return body


@pytest.fixture
async def post(mock_server: MockServer) -> AsyncIterator[Post]:
    """``await post(body, path=..., headers=..., raw=...)``: one request to the mock server."""
    async with aiohttp.ClientSession() as session:

        async def send(
            body: Any = None,
            *,
            path: str = "/chat/completions",
            headers: dict[str, str] | None = None,
            raw: bytes | None = None,
        ) -> Answer:
            sent = {"Authorization": "Bearer k"} if headers is None else headers
            data = raw if raw is not None else None
            async with session.post(
                mock_server.url + path,
                json=None if raw is not None else body,
                data=data,
                headers=sent,
            ) as response:
                text = (await response.read()).decode("utf-8", "replace")
                return Answer(response.status, text, response.headers.copy())

        yield send
