"""How a failed step or turn is named: the failure a model call, a plugin or the session store
caused, and the turn-end reason it becomes.

The loop driver catches; this module decides what the catch means, so that every way a step can
fail ends as one :class:`~dsh.values._chunks.LlmFailure` with a code a host can act on.
"""

from __future__ import annotations

from dsh.llm._assembler import AssembledMessage
from dsh.values._chunks import Finish, FinishAborted, FinishError, FinishStop, LlmFailure
from dsh.values._content import Block, Reasoning, Text
from dsh.values._errors import HookError, LlmError
from dsh.values._events import TurnAborted, TurnEndReason, TurnError

__all__ = [
    "SESSION_NOT_SAVED",
    "StepFailed",
    "adapter_error",
    "failed_finish",
    "failure_of",
    "failure_reason",
    "plugin_failure",
    "unsaved",
    "unsaved_failure",
]

#: The failure code of a turn whose events could not be written to the session store.
SESSION_NOT_SAVED = "SESSION_NOT_SAVED"


class StepFailed(Exception):
    """The step's model call failed for good; carries the failure to log."""

    def __init__(self, failure: LlmFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


#: The blocks that say nothing when their text is empty; the finishes that carry a failure.
_TEXTS, _FAILED = (Text, Reasoning), (FinishError, FinishAborted)


def _is_empty(blocks: tuple[Block, ...]) -> bool:
    return all(isinstance(b, _TEXTS) and not b.text for b in blocks)


def failure_of(result: AssembledMessage) -> LlmFailure | None:
    """The failure an assembled stream ended with, if any; an empty completion is one."""
    finish = result.finish
    if isinstance(finish, _FAILED):
        return finish.failure
    if isinstance(finish, FinishStop) and _is_empty(result.message.content):
        return LlmFailure("the model returned an empty completion", "EMPTY_RESPONSE")
    return None


def adapter_error(exc: Exception) -> LlmError:
    """An adapter raised something other than ``LlmError``."""
    return LlmError.of("ADAPTER_ERROR", f"{type(exc).__name__}: {exc}")


def failed_finish(failure: LlmFailure) -> Finish:
    """The finish chunk that ends a failed stream on the in-band path."""
    return Finish(FinishAborted(failure) if failure.code == "ABORTED" else FinishError(failure))


def failure_reason(failure: LlmFailure) -> TurnEndReason:
    """How a turn that ``failure`` ended is logged: ``aborted`` or ``error``."""
    if failure.code == "ABORTED":
        return TurnAborted(failure.message)
    return TurnError(failure)


def plugin_failure(exc: BaseException) -> LlmFailure:
    """A failure that names the plugin(s) and hook when a plugin is to blame."""
    causes = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
    if all(isinstance(cause, HookError) for cause in causes):
        return LlmFailure("; ".join(map(str, causes)), "PLUGIN_ERROR")
    return LlmFailure(f"{type(exc).__name__}: {exc}", "INTERNAL_ERROR")


def unsaved_failure(exc: BaseException) -> LlmFailure:
    """The failure of a turn whose events the session store did not take."""
    cause = plugin_failure(exc).message
    return LlmFailure(f"the session could not be saved: {cause}", SESSION_NOT_SAVED)


def unsaved(reason: TurnEndReason) -> bool:
    """True if ``reason`` says the turn's events were not saved."""
    return isinstance(reason, TurnError) and reason.failure.code == SESSION_NOT_SAVED
