"""Real agent turns through a real LiteLLM proxy (``tox -e gateway``): both adapters —
``llm_providers`` on the proxy's chat-completions route (``lite/<upstream>``) and
``llm_anthropic`` on its Messages route (``anthropic/<upstream>``) — against every upstream
format the proxy translates (the mock server as an ``openai/``, a ``deepseek/`` and an
``anthropic/`` model): text, reasoning, tool calls, a three-step tool loop in thinking mode,
usage and cost, and the upstream failing. See ``docs/gateway-tests.md``.

Where the proxy changes what reaches dsh, the case says so: what is asserted is what dsh must
report for what it was sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from dsh import AgentOptions, Harness, hookimpl
from dsh.testing.mockserver import RecordedRequest, ScenarioSpec, reply
from dsh.testing.mockserver.transcripts import V3_TOOL_ARGUMENTS
from dsh.testing.mockserver.wire import usage_json
from dsh.tools._registry import Tool, ToolExecution
from dsh.values._chunks import TokenUsage
from dsh.values._content import Reasoning, Text, ToolCall, text_of
from dsh.values._events import (
    AssistantMessage,
    SessionEvent,
    ToolResultEvent,
    TurnCompleted,
    TurnEnd,
    TurnEndReason,
    TurnError,
)
from dsh.values._request import ToolSchema
from dsh.values._tokens import Price, PriceBook
from dsh_plugins.llm_anthropic import AnthropicPlugin
from dsh_plugins.llm_providers import LlmProvidersPlugin
from tests.gateway.support import (
    KEY_ENV,
    LITELLM_ENV,
    PRICE,
    UPSTREAMS,
    Gateway,
    MockThread,
    litellm_executable,
)

pytestmark = [
    pytest.mark.skipif(
        litellm_executable() is None,
        reason=f"no LiteLLM proxy: {LITELLM_ENV} names none (`tox run -e gateway` installs one)",
    ),
    # The first case also waits for the proxy to start.
    pytest.mark.timeout(120),
]

#: The adapters by their model-id prefix: ``llm_providers``' custom provider on the proxy's
#: ``/v1/chat/completions``, and ``llm_anthropic`` on its ``/v1/messages``.
ADAPTERS = ("lite", "anthropic")
ROUTES = [pytest.param(f"{a}/{u}", id=f"{a}-{u}") for a in ADAPTERS for u in UPSTREAMS]

#: dsh's idle timeout in every case but the stall: generous, the machine is busy.
IDLE_TIMEOUT_S = 30.0
#: In the stall case: short, so dsh gives up well before the proxy's own upstream timeout
#: (``support.LITELLM_REQUEST_TIMEOUT_S``) and reports the silence itself.
STALL_IDLE_TIMEOUT_S = 4.0

#: ``llm_providers`` passes LiteLLM's signed ``thinking_blocks`` back verbatim with this quirk
#: (audit D2): without it, a tool turn in thinking mode to an ``anthropic/`` upstream comes back
#: without its thinking block, and the upstream refuses the next step.
PASSBACK = {"reasoning_passback": "thinking_blocks"}

ECHO = ToolSchema(
    "echo",
    "Repeat the text.",
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)
WEATHER = ToolSchema(
    "get_current_weather",
    "The weather in a city.",
    {
        "type": "object",
        "properties": {"location": {"type": "string"}, "format": {"type": "string"}},
        "required": ["location"],
    },
)


class Tools:
    """The host's tools: the ones the mock's scenarios call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @hookimpl
    def dsh_register_tools(self, register: Callable[..., Any]) -> None:
        register(Tool(ECHO, self._echo))
        register(Tool(WEATHER, self._weather))

    async def _echo(self, args: Any, execution: ToolExecution) -> str:
        self.calls.append(("echo", args))
        return f"echo: {args['text']}"

    async def _weather(self, args: Any, execution: ToolExecution) -> str:
        self.calls.append(("get_current_weather", args))
        return f"{args['location']}: 20 {args.get('format', 'celsius')}"


@attrs.frozen(repr=False)
class Turn:
    """One agent turn: its session events, the host's tool calls, what its steps cost, the
    requests the proxy sent upstream for it, and how many queued scenarios it left unused."""

    events: list[SessionEvent]
    calls: list[tuple[str, Any]]
    cost: float | None
    upstream: list[RecordedRequest]
    unused: int

    def __repr__(self) -> str:
        ends = [e.data.reason for e in self.events if isinstance(e.data, TurnEnd)]
        return f"Turn(ends={ends!r}, upstream requests={len(self.upstream)})"

    @property
    def end(self) -> TurnEndReason:
        [reason] = [e.data.reason for e in self.events if isinstance(e.data, TurnEnd)]
        return reason

    @property
    def messages(self) -> list[AssistantMessage]:
        return [e.data for e in self.events if isinstance(e.data, AssistantMessage)]

    @property
    def results(self) -> list[ToolResultEvent]:
        return [e.data for e in self.events if isinstance(e.data, ToolResultEvent)]

    def failure(self) -> tuple[str, int | None]:
        """The failure's code and HTTP status (the turn used every queued scenario)."""
        end = self.end
        assert isinstance(end, TurnError), f"the turn ended {end!r}, not in an error"
        assert self.unused == 0
        return end.failure.code, end.failure.status

    def completed(self) -> None:
        """The turn completed, having used every queued scenario."""
        assert self.end == TurnCompleted(), f"the turn ended {self.end!r}"
        assert self.unused == 0


@pytest.fixture(autouse=True)
def _key(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, gateway.proxy.master_key)


async def run_turn(
    gateway: Gateway,
    mock: MockThread,
    model: str,
    *specs: ScenarioSpec,
    thinking: bool | None = None,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    provider: dict[str, Any] | None = None,
) -> Turn:
    """One turn of an agent on ``model``, the mock answering the proxy with ``specs``;
    ``provider``: more settings of ``llm_providers``' custom provider."""
    tools = Tools()
    mock.queue(*specs)
    before = len(mock.requests())
    config = gateway.config(idle_timeout_s, {**PASSBACK, **(provider or {})})
    plugins = [LlmProvidersPlugin(), AnthropicPlugin(), tools]
    async with Harness(plugins, config, load_entrypoints=False) as harness:
        agent = harness.agent_loop.create("a", AgentOptions(model=model, thinking=thinking))
        agent.send("Go.")
        async with asyncio.timeout(90):
            await agent.wait_idle()
        events = list(agent.session.events)
        book = PriceBook({f"anthropic/{u}": Price(**PRICE) for u in UPSTREAMS}, harness.llm.pricing)
        costs = [
            book.cost(e.data.model, e.data.usage, time.time())
            for e in events
            if isinstance(e.data, AssistantMessage) and e.data.usage is not None
        ]
    return Turn(
        events,
        tools.calls,
        None if None in costs else sum(c for c in costs if c is not None),
        mock.requests()[before:],
        mock.queued(),
    )


def upstream_reasoning(request: RecordedRequest) -> list[str | None]:
    """What each assistant turn in an upstream request carried as its reasoning:
    ``reasoning_content`` on the chat-completions format, the thinking block's text on the
    Messages format (``None``: nothing)."""
    found: list[str | None] = []
    for message in request.body["messages"]:
        if message["role"] != "assistant":
            continue
        if request.path.endswith("/messages"):
            content = message["content"]
            blocks = [b for b in content if isinstance(b, dict) and b["type"] == "thinking"]
            found.append(blocks[0]["thinking"] if blocks else None)
        else:
            found.append(message.get("reasoning_content"))
    return found


# -- answers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ROUTES)
async def test_text(gateway: Gateway, mock: MockThread, model: str) -> None:
    turn = await run_turn(gateway, mock, model, "text-v4")
    turn.completed()
    [message] = turn.messages
    assert message.content == (Text("Hi there!"),)
    assert message.model == model


@pytest.mark.parametrize("model", ROUTES)
async def test_reasoning(gateway: Gateway, mock: MockThread, model: str) -> None:
    turn = await run_turn(gateway, mock, model, "thinking")
    turn.completed()
    [message] = turn.messages
    # The signature depends on the route (the mock's own through an anthropic/ upstream, ""
    # where the proxy made the block up from reasoning_content, none on the chat route).
    assert [(type(b), getattr(b, "text", None)) for b in message.content] == [
        (Reasoning, "We need to compare 9.11 and 9.8."),
        (Text, "9.8 is greater."),
    ]


@pytest.mark.parametrize("model", ROUTES)
async def test_one_tool(gateway: Gateway, mock: MockThread, model: str) -> None:
    loop = {"name": "tool-loop", "steps": 1}
    turn = await run_turn(gateway, mock, model, loop, loop)
    turn.completed()
    assert turn.calls == [("echo", {"text": "step 0"})]
    assert [r.content for r in turn.results] == [(Text("echo: step 0"),)]
    assert text_of(turn.messages[-1].content) == "finished after 1 steps"
    assert len(turn.upstream) == 2


@pytest.mark.parametrize("model", ROUTES)
async def test_two_parallel_tools(gateway: Gateway, mock: MockThread, model: str) -> None:
    # The two calls of the recorded transcript, answered as V4 does in thinking mode (with its
    # reasoning): the transcript itself carries none, and the proxy drops the empty reasoning
    # the mock adds to it, so through an openai/ upstream no client could continue it.
    ids = ("call_00_JQSxFX1xOHGH6ajdpN88RMXO", "call_01_L8UtYbkfaMFr7hzsToGPWGfI")
    asked = [
        (call_id, "get_current_weather", "".join(fragments))
        for call_id, fragments in zip(ids, V3_TOOL_ARGUMENTS, strict=True)
    ]
    parallel = reply(reasoning="Two cities: two calls at once.", tool_calls=asked)
    turn = await run_turn(gateway, mock, model, parallel, "text-v4")
    turn.completed()
    first, last = turn.messages
    calls = [b for b in first.content if isinstance(b, ToolCall)]
    assert [(c.id, c.name) for c in calls] == [
        ("call_00_JQSxFX1xOHGH6ajdpN88RMXO", "get_current_weather"),
        ("call_01_L8UtYbkfaMFr7hzsToGPWGfI", "get_current_weather"),
    ]
    # The Chinese arguments came through intact, whatever the spacing the proxy re-encoded.
    wanted = [json.loads("".join(fragments)) for fragments in V3_TOOL_ARGUMENTS]
    assert [json.loads(c.arguments) for c in calls] == wanted
    assert [args for _, args in turn.calls] == wanted
    assert [r.call_id for r in turn.results] == [c.id for c in calls]
    assert last.content == (Text("Hi there!"),)


@pytest.mark.parametrize("model", ROUTES)
async def test_a_three_step_tool_loop_in_thinking_mode(
    gateway: Gateway, mock: MockThread, model: str
) -> None:
    loop = {"name": "tool-loop", "steps": 3}
    turn = await run_turn(gateway, mock, model, *[loop] * 4, thinking=True)
    turn.completed()
    assert turn.calls == [("echo", {"text": f"step {i}"}) for i in range(3)]
    assert len(turn.results) == 3
    assert not any(r.is_error for r in turn.results)
    wanted = [f"{i} tool result(s) so far; 3 wanted." for i in range(4)]
    reasoning = [m.content[0] for m in turn.messages]
    assert [r.text if isinstance(r, Reasoning) else r for r in reasoning] == wanted
    assert text_of(turn.messages[-1].content) == "finished after 3 steps"
    # Every step's reasoning went back through the proxy to the upstream.
    assert len(turn.upstream) == 4
    assert upstream_reasoning(turn.upstream[-1]) == wanted[:3]


# -- usage and cost ----------------------------------------------------------------------------


def _cached() -> ScenarioSpec:
    """A text answer with 448 of its 500 prompt tokens read from the cache."""
    return reply(text="Cached.", usage=usage_json(500, 20, hits=448, reasoning=0))


@pytest.mark.parametrize("model", ROUTES)
@pytest.mark.parametrize(
    ("spec", "usage"),
    [
        pytest.param("usage-trailing", TokenUsage(9, 1), id="trailing"),
        pytest.param(_cached(), TokenUsage(52, 20, cache_read_tokens=448), id="cached"),
    ],
)
async def test_usage_and_cost(
    gateway: Gateway, mock: MockThread, model: str, spec: ScenarioSpec, usage: TokenUsage
) -> None:
    turn = await run_turn(gateway, mock, model, spec)
    turn.completed()
    [message] = turn.messages
    assert message.usage == usage
    assert turn.cost == pytest.approx(Price(**PRICE).cost(usage))


# -- the upstream failing ----------------------------------------------------------------------


@pytest.mark.parametrize("model", ROUTES)
async def test_rate_limit(gateway: Gateway, mock: MockThread, model: str) -> None:
    turn = await run_turn(gateway, mock, model, "rate-limit")
    assert turn.failure() == ("RATE_LIMIT", 429)
    assert len(turn.upstream) == 1  # the proxy did not retry
    # The upstream's ``Retry-After: 2`` does not reach dsh as such: the proxy renames it
    # ``llm_provider-retry-after`` on the chat route and drops it on the Messages route.


@pytest.mark.parametrize("model", ROUTES)
async def test_overloaded(gateway: Gateway, mock: MockThread, model: str) -> None:
    turn = await run_turn(gateway, mock, model, "overloaded")
    # The proxy answers an Anthropic upstream's 503 ``overloaded_error`` with its own HTTP 500
    # (an InternalServerError); dsh reports the status it was sent.
    assert turn.failure() == ("SERVER", 500 if model.endswith("/ant-up") else 503)
    assert len(turn.upstream) == 1


@pytest.mark.parametrize("model", ROUTES)
async def test_disconnect(gateway: Gateway, mock: MockThread, model: str) -> None:
    turn = await run_turn(gateway, mock, model, "disconnect")
    # Not STREAM_CLOSED, as directly against the mock: the proxy reports the upstream's broken
    # stream as a failure of its own, a server failure. Where it has begun its answer it does
    # so inside the stream (audit L3: code "500" on the chat route, an ``api_error`` event
    # without a status on the Messages route), else as HTTP 500 — which one depends on
    # whether its first read of the upstream already failed, so the status is not asserted.
    code, _ = turn.failure()
    assert code == "SERVER"
    assert turn.messages == []  # the partial answer is not kept as a message


@pytest.mark.parametrize("model", ROUTES)
async def test_stall(gateway: Gateway, mock: MockThread, model: str) -> None:
    turn = await run_turn(gateway, mock, model, "stall", idle_timeout_s=STALL_IDLE_TIMEOUT_S)
    # dsh's idle timeout fires first; the proxy's pings on the Messages route are no progress.
    code, _ = turn.failure()
    assert code == "TIMEOUT"


#: How long the proxy waits for the upstream in the case where it times out first.
PROXY_TIMEOUT_S = 3


@pytest.mark.parametrize("model", [pytest.param(f"lite/{u}", id=f"lite-{u}") for u in UPSTREAMS])
async def test_the_proxy_times_out_first(gateway: Gateway, mock: MockThread, model: str) -> None:
    # A ``timeout`` in the request body is the proxy's upstream timeout for that request (sent
    # with the provider's ``extra_body``; llm_anthropic has none). The proxy has streamed the
    # partial answer with HTTP 200, so it reports its timeout in the stream, with a string code
    # (audit L3, D3): "408" from an ``openai/`` upstream, which dsh must read as a timeout; but
    # "500" and "Timeout on reading data from socket" (an APIConnectionError) from the
    # ``deepseek/`` and ``anthropic/`` ones, which is the proxy calling it a server failure.
    extra = {"extra_body": {"timeout": PROXY_TIMEOUT_S}}
    turn = await run_turn(gateway, mock, model, "stall", provider=extra)
    code, _ = turn.failure()
    assert code == ("TIMEOUT" if model == "lite/oai-up" else "SERVER")
