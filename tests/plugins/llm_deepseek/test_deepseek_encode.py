"""The body is encoded with each history message encoded once per session: the text is compact
JSON of the body, as the history grows and when it is rewritten."""

from __future__ import annotations

import json
import tracemalloc

import attrs
from hypothesis import given, settings

from dsh.llm._deepseek import model_info
from dsh.testing.mockserver import MockServer
from dsh.testing.strategies import llm_requests
from dsh.values._content import Message, Text
from dsh.values._request import LlmRequest
from dsh_plugins.llm_deepseek import DeepSeekAdapter, DeepSeekConfig
from dsh_plugins.llm_deepseek.request import (
    encode_body,
    encoded_wire,
    passes_reasoning_back,
    request_body,
    wire_json,
    wire_message,
)


@settings(max_examples=200, deadline=None)
@given(llm_requests)
def test_the_encoded_body_is_compact_json_of_the_body(request: LlmRequest) -> None:
    passback = passes_reasoning_back(request)
    encoded = [encoded_wire(m, passback, wire_message) for m in request.messages]
    text = encode_body(request, "m", encoded)
    body = json.loads(json.dumps(request_body(request, "m")))  # tuples as lists
    assert json.loads(text) == body
    text.decode()  # UTF-8


def test_what_orjson_refuses_is_written_by_json_dumps_as_ascii() -> None:
    lone = {"content": "a\ud800b", "big": 2**70}
    text = wire_json(lone)
    assert text == b'{"content":"a\\ud800b","big":1180591620717411303424}'
    assert json.loads(text) == lone
    assert wire_json({"content": "héllo"}) == '{"content":"héllo"}'.encode()


def user(text: str) -> Message:
    return Message("user", (Text(text),))


async def test_a_session_s_requests_carry_its_history_as_it_grows_and_is_rewritten(
    mock_server: MockServer,
) -> None:
    adapter = DeepSeekAdapter(DeepSeekConfig(base_url=mock_server.url, api_key="k"))
    first = LlmRequest("deepseek-v4-flash", (user("a"), user("b")), system="s", session_id="x")
    grown = attrs.evolve(first, messages=(*first.messages, user("c")))
    rewritten = attrs.evolve(first, messages=(user("summary"), grown.messages[2]))
    other = attrs.evolve(grown, session_id=None, thinking=False)
    sent = [first, grown, rewritten, other]
    for request in sent:
        async for _ in adapter.stream(request):
            pass
    await adapter.aclose()
    bodies = [r.body for r in mock_server.requests]
    assert bodies == [json.loads(json.dumps(request_body(r, "deepseek-flash"))) for r in sent]
    assert [m["content"] for m in bodies[2]["messages"]] == ["s", "summary", "c"]


def test_model_info_is_built_once_per_model() -> None:
    assert model_info("deepseek-flash") is model_info("deepseek-flash")
    assert model_info("unknown") is None


def test_an_encoded_message_holds_no_more_memory_than_its_json() -> None:
    """The adapter keeps each message's encoding for the session's life: a bytes object of its
    own size, not the 4 KB buffer orjson's output holds (1,000 agents held 40 KB more each)."""
    messages = [user(f"message {i}") for i in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [encoded_wire(m, False, wire_message) for m in messages]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert all(json.loads(k)["content"] == f"message {i}" for i, k in enumerate(kept))
    assert held / len(kept) < 512  # each ~60 bytes of JSON, ~100 with its object
