"""What gateways put on the chat-completions wire (found by running dsh through the LiteLLM
proxy, with the official ``openai`` SDK as referee): signed reasoning blocks that must come
back (LiteLLM's ``thinking_blocks``, OpenRouter's ``reasoning_details``), ``delta.refusal``,
error codes sent as strings, and the request ids a gateway names."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dsh.llm._assembler import assemble
from dsh.testing.conformance import check_stream
from dsh.values._chunks import BlockEnd, BlockStart, Finish, FinishError, StreamChunk, TextDelta
from dsh.values._content import Message, Reasoning, Text, ToolCall, ToolResult
from dsh.values._request import LlmRequest
from dsh_plugins.llm_providers import ProviderSettings, Translator, resolve
from dsh_plugins.llm_providers.config import ModelSettings, ReasoningPassback
from dsh_plugins.llm_providers.failures import error_object, request_id, retry_after
from dsh_plugins.llm_providers.request import body_for

SIGNATURE = "N+28D694pWflioyRDvnxbJSwD+bsbLVEExJpfoY95oE="


def run(*payloads: Any, passback: ReasoningPassback = "thinking_blocks") -> list[StreamChunk]:
    translator = Translator("lite", "auto", passback=passback)
    out: list[StreamChunk] = []
    for payload in payloads:
        out += translator.feed(payload)
    return out + translator.done()


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def call(index: int, call_id: str) -> dict[str, Any]:
    function = {"name": "echo", "arguments": '{"text": "x"}'}
    return {"index": index, "id": call_id, "type": "function", "function": function}


#: LiteLLM's stream for an Anthropic upstream's thinking tool turn (the audit's shapes): the
#: thinking text with each fragment, then the signature in a fragment of its own.
LITELLM_TOOL_TURN = (
    delta(
        role="assistant",
        reasoning_content="0 results",
        thinking_blocks=[{"type": "thinking", "thinking": "0 results", "signature": ""}],
    ),
    delta(
        reasoning_content=" so far",
        thinking_blocks=[{"type": "thinking", "thinking": " so far", "signature": ""}],
    ),
    delta(
        reasoning_content="",
        thinking_blocks=[{"type": "thinking", "thinking": "", "signature": SIGNATURE, "index": 0}],
        content="",
    ),
    delta(tool_calls=[call(0, "call_0")]),
    delta("tool_calls"),
)
MERGED = [{"type": "thinking", "thinking": "0 results so far", "signature": SIGNATURE, "index": 0}]


def test_thinking_blocks_are_kept_with_the_reasoning_they_came_with() -> None:
    chunks = run(*LITELLM_TOOL_TURN)
    assert check_stream(chunks) == []
    content = assemble(chunks).message.content
    assert content == (
        Reasoning("0 results so far", provider_data=json.dumps(MERGED)),
        ToolCall("call_0", "echo", '{"text": "x"}'),
    )


def test_without_the_quirk_the_blocks_are_ignored_and_reasoning_ends_at_once() -> None:
    chunks = run(*LITELLM_TOOL_TURN, passback="none")
    assert BlockEnd(0, Reasoning("0 results so far")) in chunks
    assert chunks.index(BlockEnd(0, Reasoning("0 results so far"))) < chunks.index(
        BlockStart(1, "tool-call")
    )


def test_blocks_without_reasoning_text_get_a_reasoning_block_of_their_own() -> None:
    redacted = {"type": "reasoning.encrypted", "data": "ENC", "index": 0}
    chunks = run(
        delta(content="hi", reasoning_details=[redacted]),
        delta("stop"),
        passback="reasoning_details",
    )
    assert check_stream(chunks) == []
    assert assemble(chunks).message.content == (
        Text("hi"),
        Reasoning("", provider_data=json.dumps([redacted])),
    )


def test_odd_reasoning_fragments_are_skipped() -> None:
    chunks = run(
        delta(reasoning_content="r", thinking_blocks="not a list"),
        delta(thinking_blocks=[{"type": "thinking", "thinking": "r", "extra": None}, 5]),
        delta(thinking_blocks=[{"index": 1, "extra": "kept"}]),
        delta("stop"),
    )
    [reasoning] = assemble(chunks).message.content
    assert isinstance(reasoning, Reasoning) and reasoning.provider_data is not None
    assert json.loads(reasoning.provider_data) == [
        {"type": "thinking", "thinking": "r", "extra": None},
        {"index": 1, "extra": "kept"},
    ]


_pieces = st.text(max_size=6)


@given(
    st.lists(
        st.tuples(st.sampled_from(["thinking", "signature"]), _pieces), min_size=1, max_size=12
    )
)
def test_any_split_of_a_block_joins_back_to_the_block(pieces: list[tuple[str, str]]) -> None:
    """Whatever fragments a gateway cuts a thinking block into, the kept block is the whole."""
    payloads = [
        delta(
            reasoning_content="r",
            thinking_blocks=[{"type": "thinking", "thinking": "", "signature": ""}],
        )
    ]
    for field, piece in pieces:
        payloads.append(delta(thinking_blocks=[{"type": "thinking", field: piece}]))
    payloads.append(delta("stop"))
    [reasoning] = assemble(run(*payloads)).message.content
    assert isinstance(reasoning, Reasoning) and reasoning.provider_data is not None
    [block] = json.loads(reasoning.provider_data)
    assert block == {
        "type": "thinking",
        "thinking": "".join(p for f, p in pieces if f == "thinking"),
        "signature": "".join(p for f, p in pieces if f == "signature"),
    }


def provider(name: str = "lite", **settings: Any) -> Any:
    models = {"claude": ModelSettings(reasoning=True)}
    base_url = "http://127.0.0.1:1/v1" if name == "lite" else None
    return resolve(name, ProviderSettings(base_url=base_url, models=models, **settings))


def tool_turn(reasoning: Reasoning) -> LlmRequest:
    history = (
        Message("user", (Text("go"),)),
        Message("assistant", (reasoning, ToolCall("call_0", "echo", "{}"))),
        Message("user", (ToolResult("call_0", (Text("x"),)),)),
    )
    return LlmRequest("lite/claude", history)


def test_kept_blocks_go_back_verbatim_on_the_assistant_message() -> None:
    reasoning = Reasoning("0 results so far", provider_data=json.dumps(MERGED))
    lite = provider(
        reasoning_passback="thinking_blocks", send_reasoning=True, reasoning_field="auto"
    )
    [_, assistant, _] = body_for(lite, "claude", tool_turn(reasoning))["messages"]
    assert assistant["thinking_blocks"] == MERGED
    assert assistant["reasoning_content"] == "0 results so far"
    # Off (a custom provider's default): the text only, as before.
    [_, plain, _] = body_for(provider(), "claude", tool_turn(reasoning))["messages"]
    assert "thinking_blocks" not in plain
    # On, but reasoning from elsewhere has nothing to pass back.
    [_, foreign, _] = body_for(lite, "claude", tool_turn(Reasoning("r")))["messages"]
    assert "thinking_blocks" not in foreign


def test_the_profiles_say_where_each_gateway_keeps_its_blocks() -> None:
    assert provider("openrouter").reasoning_passback == "reasoning_details"
    assert provider("lite").reasoning_passback == "none"
    assert provider("openai").reasoning_passback == "none"
    assert provider("lite", reasoning_passback="thinking_blocks").reasoning_passback == (
        "thinking_blocks"
    )


def test_a_streamed_refusal_is_kept_as_text_and_ends_content_filter() -> None:
    """The audit's repro: OpenAI's ``delta.refusal`` (an empty one first)."""
    chunks = run(
        delta(role="assistant", content=None, refusal=""),
        delta(refusal="I can't help with that."),
        delta("stop"),
        passback="none",
    )
    assert check_stream(chunks) == []
    assert TextDelta(0, "I can't help with that.") in chunks
    end = chunks[-1]
    assert isinstance(end, Finish) and isinstance(end.reason, FinishError)
    assert end.reason.failure.code == "CONTENT_FILTER"
    assert "I can't help with that." in end.reason.failure.message
    assert assemble(chunks).message.content == (Text("I can't help with that."),)


def test_error_codes_sent_as_strings_are_read_as_the_status_they_name() -> None:
    """LiteLLM sends ``"code": "408"`` (its own timeout), ``"429"``, ``"500"``."""
    codes = {
        code: error_object("lite", {"message": "m", "code": code}).code
        for code in ("429", "408", "500", 429, "rate_limit_exceeded", "4290", "", "٤٢٩", 99)
    }
    assert codes == {
        "429": "RATE_LIMIT",
        "408": "TIMEOUT",
        "500": "SERVER",
        429: "RATE_LIMIT",
        "rate_limit_exceeded": "RATE_LIMIT",
        "4290": "SERVER",
        "": "SERVER",
        "٤٢٩": "SERVER",
        99: "SERVER",
    }
    assert error_object("lite", {"code": "429"}).status == 429


def test_request_ids_through_litellm() -> None:
    assert request_id({"llm_provider-x-ds-trace-id": "mock-289", "x-litellm-call-id": "c"}) == (
        "mock-289"
    )
    assert request_id({"x-litellm-call-id": "c-1"}) == "c-1"
    assert request_id({"x-request-id": "r", "x-litellm-call-id": "c"}) == "r"


def test_retry_after_through_litellm() -> None:
    """LiteLLM's chat route renames the upstream's ``Retry-After``."""
    assert retry_after({"llm_provider-retry-after": "2"}) == 2.0
    assert retry_after({"Retry-After": "1", "llm_provider-retry-after": "2"}) == 1.0
    assert retry_after({}) is None
