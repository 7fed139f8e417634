"""``retry``: the request-error policy — exponential backoff with jitter for transient failures.

Implements ``dsh_agent_request_error`` (call style ``first``) as ``trylast``, so any third-party
policy is asked first. Retries the codes in ``retry_codes`` (by default ``RATE_LIMIT``,
``SERVER``, ``TIMEOUT``, ``TRANSPORT``, ``EMPTY_RESPONSE``; never ``AUTH``,
``INSUFFICIENT_BALANCE`` or ``INVALID_REQUEST``, which a retry cannot fix) until ``max_attempts``
model calls were made, honouring the provider's ``Retry-After``. The plugin decides, the loop
records: every retry becomes an ``llm/retry`` session event
(:class:`dsh.plugin.RetryEvent`). Configured by section ``retry``; see
``docs/plugins/retry.md``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from dsh.plugin import Agent, LlmFailure, Retry, Value, at_least, at_most, hookimpl

if TYPE_CHECKING:
    from dsh.plugin import Harness

__all__ = ["RetryConfig", "RetryPlugin", "backoff_s"]

SECTION = "retry"


@frozen(repr=False, eq=False)
class RetryConfig(Value):
    """Section ``retry``. The n-th retry waits ``base_delay_s * 2**(n-1)``, capped at
    ``max_delay_s``, minus up to ``jitter`` of it at random. ``max_attempts`` counts model calls,
    the first included. A ``Retry-After`` longer than ``max_retry_after_s`` is not waited for:
    the step fails instead."""

    base_delay_s: float = field(default=0.5, validator=at_least(0))
    max_delay_s: float = field(default=10.0, validator=at_least(0))
    max_attempts: int = field(default=5, validator=at_least(1))
    jitter: float = field(default=0.1, validator=[at_least(0), at_most(1)])
    max_retry_after_s: float = field(default=60.0, validator=at_least(0))
    retry_codes: tuple[str, ...] = (
        "RATE_LIMIT",
        "SERVER",
        "TIMEOUT",
        "TRANSPORT",
        "EMPTY_RESPONSE",
    )


def backoff_s(config: RetryConfig, attempt: int, draw: float) -> float:
    """The wait after failed attempt ``attempt`` (from 1), for a random ``draw`` in [0, 1)."""
    capped = min(config.max_delay_s, config.base_delay_s * 2.0 ** (attempt - 1))
    return capped * (1 - config.jitter * draw)


class RetryPlugin:
    """The built-in retry policy. ``random`` is the jitter source (inject a fixed one in tests)."""

    def __init__(self, random: Callable[[], float] = random.random) -> None:
        self._random = random
        self._config = RetryConfig()

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, RetryConfig)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        self._config = harness.config.section(SECTION, RetryConfig)

    @hookimpl(trylast=True)
    def dsh_agent_request_error(
        self, agent: Agent, turn: int, step: int, failure: LlmFailure, attempt: int
    ) -> Retry | None:
        delay_s = self.delay_for(failure, attempt)
        if delay_s is None:
            return None
        return Retry(delay_s, max_attempts=self._config.max_attempts)

    def delay_for(self, failure: LlmFailure, attempt: int) -> float | None:
        """How long to wait before retrying, or ``None`` to let the step fail."""
        config = self._config
        if failure.code not in config.retry_codes or attempt >= config.max_attempts:
            return None
        delay_s = backoff_s(config, attempt, self._random())
        if failure.retry_after_s is not None:
            if failure.retry_after_s > config.max_retry_after_s:
                return None
            delay_s = max(delay_s, failure.retry_after_s)
        return delay_s
