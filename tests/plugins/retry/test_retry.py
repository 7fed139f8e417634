"""The retry policy: which failures it retries, how long it waits, what it logs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh import AgentOptions, Harness, Retry, hookimpl
from dsh.loop._loop import LoopAgent
from dsh.testing import ScriptedAdapter, raise_error, text_response
from dsh.values._chunks import LlmFailure
from dsh.values._events import RetryEvent, TurnCompleted, TurnEnd, TurnError
from dsh_plugins.retry import RetryConfig, RetryPlugin, backoff_s


class Clock:
    """The fake clock the loop waits on: records every wait, never sleeps."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def sleep(self, delay_s: float) -> None:
        self.waits.append(delay_s)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def harness(clock: Clock) -> AsyncIterator[Harness]:
    async with Harness(
        load_entrypoints=False, plugins=[RetryPlugin(random=lambda: 0.5)], sleep=clock.sleep
    ) as h:
        yield h


def agent_on(harness: Harness, *script: Any) -> LoopAgent:
    harness.llm.register_adapter(["scripted"], ScriptedAdapter(list(script)))
    return harness.agent_loop.create("a", AgentOptions(model="scripted"))


async def run_turn(agent: LoopAgent) -> TurnEnd:
    agent.send("hi")
    await agent.wait_idle()
    end = next(e.data for e in reversed(agent.session.events) if e.type == "turn/end")
    assert isinstance(end, TurnEnd)
    return end


def retries(agent: LoopAgent) -> list[RetryEvent]:
    return [e.data for e in agent.session.events if isinstance(e.data, RetryEvent)]


@pytest.mark.parametrize("code", ["RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT", "EMPTY_RESPONSE"])
async def test_transient_failures_are_retried_with_a_logged_event(
    code: str, harness: Harness, clock: Clock
) -> None:
    agent = agent_on(harness, raise_error(code, "flaky"), text_response("ok"))
    end = await run_turn(agent)
    assert end.reason == TurnCompleted()
    assert retries(agent) == [RetryEvent(1, 1, 1, code, "flaky", 0.475, None, 5)]
    assert clock.waits == [0.475]


@pytest.mark.parametrize(
    "code",
    ["AUTH", "INSUFFICIENT_BALANCE", "INVALID_REQUEST", "STREAM_CLOSED", "CONTEXT_WINDOW_EXCEEDED"],
)
async def test_failures_a_retry_cannot_fix_are_not_retried(
    code: str, harness: Harness, clock: Clock
) -> None:
    agent = agent_on(harness, raise_error(code, "no"), text_response("never"))
    end = await run_turn(agent)
    assert isinstance(end.reason, TurnError)
    assert end.reason.failure.code == code
    assert (retries(agent), clock.waits) == ([], [])


async def test_backoff_doubles_until_max_attempts_then_the_step_fails(
    harness: Harness, clock: Clock
) -> None:
    agent = agent_on(harness, *(raise_error("SERVER", "down") for _ in range(5)))
    end = await run_turn(agent)
    assert isinstance(end.reason, TurnError)
    assert [r.attempt for r in retries(agent)] == [1, 2, 3, 4]
    assert clock.waits == [0.475, 0.95, 1.9, 3.8]


def test_backoff_is_capped_and_jitter_only_shortens_it() -> None:
    config = RetryConfig()
    assert [backoff_s(config, n, 0.0) for n in (1, 2, 5, 6, 20)] == [0.5, 1.0, 8.0, 10.0, 10.0]
    assert backoff_s(config, 6, 0.999) == pytest.approx(9.001)


def test_retry_after_is_honoured_unless_it_is_too_long() -> None:
    policy = RetryPlugin(random=lambda: 0.0)
    assert policy.delay_for(LlmFailure("x", "RATE_LIMIT", 429, retry_after_s=7.0), 1) == 7.0
    assert policy.delay_for(LlmFailure("x", "RATE_LIMIT", 429, retry_after_s=0.1), 2) == 1.0
    assert policy.delay_for(LlmFailure("x", "RATE_LIMIT", 429, retry_after_s=61.0), 1) is None


async def test_everything_is_configurable(clock: Clock) -> None:
    config = {
        "retry": {
            "base_delay_s": 2,
            "max_delay_s": 3,
            "max_attempts": 3,
            "jitter": 0,
            "retry_codes": ["AUTH"],
        }
    }
    async with Harness(
        load_entrypoints=False, plugins=[RetryPlugin], config=config, sleep=clock.sleep
    ) as harness:
        agent = agent_on(harness, *(raise_error("AUTH", "again") for _ in range(3)))
        end = await run_turn(agent)
    assert isinstance(end.reason, TurnError)
    assert clock.waits == [2.0, 3.0]


async def test_a_third_party_policy_is_asked_first(clock: Clock) -> None:
    class Patient:
        @hookimpl
        def dsh_agent_request_error(self, failure: LlmFailure) -> Retry | None:
            return Retry(42.0) if failure.code == "AUTH" else None

    async with Harness(
        load_entrypoints=False, plugins=[RetryPlugin(lambda: 0.0), Patient()], sleep=clock.sleep
    ) as harness:
        agent = agent_on(
            harness, raise_error("AUTH", "x"), raise_error("SERVER", "y"), text_response("ok")
        )
        end = await run_turn(agent)
    assert end.reason == TurnCompleted()
    assert clock.waits == [42.0, 1.0]
    # The policies decide; the loop logs both retries, whoever decided them.
    assert retries(agent) == [
        RetryEvent(1, 1, 1, "AUTH", "x", 42.0),
        RetryEvent(1, 1, 2, "SERVER", "y", 1.0, None, 5),
    ]


async def test_a_policy_may_count_attempts_itself_or_log_its_retry_its_own_way(
    clock: Clock,
) -> None:
    class Counting:
        @hookimpl
        def dsh_agent_request_error(self, failure: LlmFailure, attempt: int) -> Retry | None:
            if failure.code == "AUTH":
                return Retry(1.0, attempt=attempt + 10, max_attempts=20)
            return Retry(2.0, record=False) if attempt < 3 else None

    async with Harness(load_entrypoints=False, plugins=[Counting()], sleep=clock.sleep) as h:
        agent = agent_on(
            h, raise_error("AUTH", "x"), raise_error("SERVER", "y"), text_response("ok")
        )
        end = await run_turn(agent)
    assert end.reason == TurnCompleted()
    assert clock.waits == [1.0, 2.0]
    assert retries(agent) == [RetryEvent(1, 1, 11, "AUTH", "x", 1.0, None, 20)]


async def test_the_retry_event_type_is_registered(harness: Harness) -> None:
    agent = agent_on(harness, raise_error("SERVER", "x"), text_response("ok"))
    await run_turn(agent)
    (event,) = [e for e in agent.session.events if e.type == "llm/retry"]
    assert harness.events.decode(harness.events.encode(event)) == event


def test_the_plugin_is_registered_as_an_entry_point() -> None:
    from importlib.metadata import entry_points

    (found,) = entry_points(group="dsh", name="retry")
    assert found.load() is RetryPlugin
