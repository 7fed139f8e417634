"""The official SDKs as referees: every stream case of the conformance kit, read by dsh's
adapters and by the official SDK of its wire format from the same bytes, must come to the same
message — text, reasoning (and signatures), tool calls (ids, names, arguments), finish reason
and usage — or be listed in :data:`DEPARTURES` with why dsh deliberately differs.

For each case the kit runs the adapter against the mock server (``run_case``); the request the
adapter sent is then posted again to a fresh mock server with the case's scenario queued, and
the answer's bytes are kept (:func:`capture`, which checks they are the frames the kit held the
adapter to); :mod:`sdk_referees` replays them into the SDK's own client. A departure that no
longer differs fails, so the table stays true. ``docs/conformance.md`` lists the same table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh.llm._assembler import assemble
from dsh.testing.conformance import (
    CASES,
    AdapterTarget,
    CaseReport,
    ConformanceCase,
    Wire,
    run_case,
)
from dsh.values._chunks import (
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    TokenUsage,
)
from dsh.values._content import Reasoning, Text, ToolCall

from ..llm_providers.test_providers_conformance import DEEPSEEK_ONLY
from ..llm_providers.test_providers_conformance import TARGET as PROVIDERS
from .capture import capture
from .sdk_referees import Reading, ToolCallRead, arguments_json, read_anthropic, read_openai
from .test_builtin_adapters import HAND_ROLLED, MESSAGES

#: How dsh names each finish (chat completions) or stop (Messages) reason the mock sends
#: (``docs/streamchunk.md``); a reason not listed is ``UNKNOWN_FINISH``.
FINISHES: dict[Wire, dict[str, str]] = {
    "openai": {
        "stop": "stop",
        "tool_calls": "tool-calls",
        "length": "max-tokens",
        "content_filter": "CONTENT_FILTER",
        "insufficient_system_resource": "SERVER",
    },
    "anthropic": {
        "end_turn": "stop",
        "stop_sequence": "stop",
        "tool_use": "tool-calls",
        "max_tokens": "max-tokens",
        "refusal": "CONTENT_FILTER",
    },
}

Aspect = str
"""What is compared: ``text``, ``reasoning``, ``signatures`` (Messages), ``tool-calls``,
``ending`` (the finish, or how the read failed) and ``usage``."""


@dataclass(frozen=True)
class Departure:
    """Where dsh deliberately reads a case otherwise than the SDK: the aspects that differ,
    and why."""

    aspects: frozenset[Aspect]
    why: str


def _departs(why: str, *aspects: Aspect) -> Departure:
    return Departure(frozenset(aspects), why)


_CUT = (
    "the body ends cleanly without its terminal event ({}): the SDK accepts what came, dsh "
    "fails it STREAM_CLOSED (a cut stream is not a whole answer)"
)
_KEEP_ALIVES = (
    "keep-alive comments forever: the SDK has no deadline while they come and waits (DeepSeek "
    "closes after 10 minutes), dsh fails TIMEOUT"
)
_NOT_A_STREAM = (
    "HTTP 200 without an event stream: the SDK finds no event in the body and reports an "
    "empty, unfinished stream without an error; dsh fails it ({})"
)
_BAD_UTF8 = (
    "a byte that is not UTF-8: the SDK's decoder fails the stream there; dsh decodes with "
    "replacement (U+FFFD), as a browser's EventSource does"
)
_EMPTY = (
    "finish without any content: the SDK accepts an empty message; dsh fails it "
    "EMPTY_RESPONSE (a turn with nothing to show)"
)

#: Every case in which dsh reads the same bytes otherwise than the official SDK, by wire.
DEPARTURES: dict[tuple[Wire, str], Departure] = {
    ("openai", "framing-fields"): _departs(
        "proxy framing: the SDK keeps an `id:` for good, so the blank line after a later "
        "keep-alive dispatches an empty event whose JSON it fails to parse; dsh ignores every "
        "field but `data`, as WHATWG SSE says for fields it does not use",
        "text",
        "ending",
    ),
    ("openai", "finish-without-delta"): _departs(
        "a finish chunk without `delta` (outside OpenAI's chunk schema, sent by gateways): the "
        "SDK's accumulator fails on it; dsh reads the finish",
        "ending",
    ),
    ("openai", "usage-choices-null"): _departs(
        "a usage chunk with `choices: null` (gateways send it): the SDK's accumulator iterates "
        "`choices` and fails; dsh reads the usage",
        "ending",
    ),
    ("openai", "usage-no-choices"): _departs(
        "a usage chunk without `choices` (gateways send it): the SDK's accumulator iterates "
        "`choices` and fails; dsh reads the usage",
        "ending",
    ),
    ("openai", "invalid-utf8"): _departs(_BAD_UTF8, "text", "ending"),
    ("anthropic", "invalid-utf8"): _departs(_BAD_UTF8, "text", "ending"),
    ("openai", "missing-done"): _departs(_CUT.format("`[DONE]`"), "ending", "usage"),
    ("anthropic", "missing-done"): _departs(_CUT.format("`message_stop`"), "ending", "usage"),
    ("openai", "empty"): _departs(_EMPTY, "ending"),
    ("anthropic", "empty"): _departs(_EMPTY, "ending"),
    ("openai", "keep-alive-stall"): _departs(_KEEP_ALIVES, "ending"),
    ("anthropic", "keep-alive-stall"): _departs(_KEEP_ALIVES, "ending"),
    ("openai", "queued-stall"): _departs(_KEEP_ALIVES, "ending"),
    ("anthropic", "queued-stall"): _departs(_KEEP_ALIVES, "ending"),
    **{
        (wire, name): _departs(_NOT_A_STREAM.format(code), "ending")
        for wire in ("openai", "anthropic")
        for name, code in (
            ("json-error-200", "RATE_LIMIT, the error object's type"),
            ("completion-200", "MALFORMED_RESPONSE"),
            ("html-200", "MALFORMED_RESPONSE"),
            ("empty-200", "MALFORMED_RESPONSE"),
        )
    },
}

#: Cases the SDKs do not referee: nothing in their bytes to compare.
NOT_REFEREED = {"abort": "the consumer cancels after the first chunk: it is about the consumer"}

_REFEREES = {"openai": read_openai, "anthropic": read_anthropic}
#: The adapters refereed: both hand-rolled readers of the chat-completions wire (DeepSeek's,
#: and the OpenAI-compatible providers' that gateways are reached through) and the Messages
#: reader. (``llm_openai_sdk`` reads through the ``openai`` SDK itself, and the kit's own tests
#: hold it to ``llm_deepseek`` chunk for chunk.)
ADAPTERS: dict[str, AdapterTarget] = {
    "llm_deepseek": HAND_ROLLED,
    "llm_providers": PROVIDERS,
    "llm_anthropic": MESSAGES,
}


@dataclass(frozen=True)
class _Read:
    """One side's reading, in the terms both sides share."""

    text: str
    reasoning: str
    signatures: tuple[str, ...]
    tool_calls: tuple[ToolCallRead, ...]
    ending: str
    usage: TokenUsage | None
    status: int | None = None


def _dsh(report: CaseReport) -> _Read:
    """What dsh's adapter made of the answer: the stream assembled, its finish named as the
    kit names a failure (an empty ``stop`` is ``EMPTY_RESPONSE``)."""
    outcome = assemble(report.stream)
    blocks = outcome.message.content
    finish = outcome.finish
    status = None
    if isinstance(finish, FinishError | FinishAborted):
        ending, status = finish.failure.code, finish.failure.status
    elif isinstance(finish, FinishStop):
        empty = all(isinstance(b, Text | Reasoning) and not b.text for b in blocks)
        ending = "EMPTY_RESPONSE" if empty else "stop"
    elif isinstance(finish, FinishToolCalls):
        ending = "tool-calls"
    else:
        assert isinstance(finish, FinishMaxTokens), finish
        ending = "max-tokens"
    parsed = report.wire == "anthropic"
    calls = tuple(
        ToolCallRead(b.id, b.name, arguments_json(b.arguments) if parsed else b.arguments)
        for b in blocks
        if isinstance(b, ToolCall)
    )
    reasoning = [b for b in blocks if isinstance(b, Reasoning)]
    return _Read(
        "".join(b.text for b in blocks if isinstance(b, Text)),
        "".join(b.text for b in reasoning),
        tuple(b.signature or "" for b in reasoning) if parsed else (),
        calls,
        ending,
        outcome.usage,
        status,
    )


def _sdk_ending(reading: Reading, wire: Wire) -> str:
    if reading.waiting:
        return "waits"
    if reading.raised is not None:
        return f"raises {reading.raised}"
    if reading.finish is None:
        return "no finish"
    return FINISHES[wire].get(reading.finish, "UNKNOWN_FINISH")


def differences(report: CaseReport, reading: Reading) -> dict[Aspect, str]:
    """The aspects in which dsh's reading of a case differs from the SDK's, each with both
    sides. What streamed is compared always (up to the failure, where the SDK raised); the
    ending: a failure the SDK raised must be a failure in dsh too (with the same HTTP status),
    else dsh's finish must be the SDK's finish reason as dsh names it; signatures and usage
    are compared where the SDK accepted the answer (before a failure the SDK holds an
    unfinished block's empty signature and ``message_start``'s usage)."""
    dsh = _dsh(report)
    wire = report.wire
    sdk_ending = _sdk_ending(reading, wire)
    found: dict[Aspect, str] = {}
    pairs: list[tuple[Aspect, object, object]] = [
        ("text", dsh.text, reading.text),
        ("reasoning", dsh.reasoning, reading.reasoning),
        ("tool-calls", dsh.tool_calls, reading.tool_calls),
    ]
    if reading.raised is None and not reading.waiting:
        pairs += [("signatures", dsh.signatures, reading.signatures)]
        pairs += [("usage", dsh.usage, reading.usage), ("ending", dsh.ending, sdk_ending)]
    else:
        failed = dsh.ending not in ("stop", "tool-calls", "max-tokens")
        http = reading.status is not None and reading.status != 200
        agrees = failed and not reading.waiting and (not http or dsh.status == reading.status)
        if not agrees:
            found["ending"] = f"dsh {dsh.ending} (HTTP {dsh.status}), SDK {sdk_ending}"
    for aspect, ours, theirs in pairs:
        if ours != theirs:
            found[aspect] = f"dsh {ours!r:.200}, SDK {theirs!r:.200}"
    return found


def _refereed() -> list[object]:
    return [
        pytest.param(adapter, case, id=f"{adapter}-{case}")
        for adapter, target in ADAPTERS.items()
        for case in CASES
        if target.wire in case.wires
        and case.name not in NOT_REFEREED
        and not (adapter == "llm_providers" and case.name in DEEPSEEK_ONLY)
    ]


def test_the_table_names_only_refereed_cases() -> None:
    refereed = {(wire, case.name) for case in CASES for wire in case.wires}
    assert set(DEPARTURES) <= refereed
    assert set(NOT_REFEREED) <= {case.name for case in CASES}
    assert not {name for _, name in DEPARTURES} & set(NOT_REFEREED)


_DOCS = Path(__file__).parents[3] / "docs" / "conformance.md"


def _documented() -> dict[tuple[str, str], frozenset[Aspect]]:
    """The departures ``docs/conformance.md`` lists: its table between the
    ``sdk-departures`` markers, one row per set of cases (``| cases | wires | aspects | why |``)."""
    text = _DOCS.read_text(encoding="utf-8")
    table = text.split("<!-- sdk-departures -->")[1].split("<!-- /sdk-departures -->")[0]
    listed: dict[tuple[str, str], frozenset[Aspect]] = {}
    for row in table.strip().splitlines()[2:]:
        cases, wires, aspects = row.split(" | ")[:3]
        for wire in re.findall(r"`([^`]+)`", wires):
            for name in re.findall(r"`([^`]+)`", cases):
                listed[(wire, name)] = frozenset(a.strip() for a in aspects.split(","))
    return listed


def test_the_docs_list_the_departures() -> None:
    assert _documented() == {key: d.aspects for key, d in DEPARTURES.items()}


@pytest.mark.parametrize(("adapter", "case"), _refereed())
async def test_dsh_reads_what_the_official_sdk_reads(adapter: str, case: ConformanceCase) -> None:
    report = await run_case(ADAPTERS[adapter], case)
    wire = report.wire
    reading = await _REFEREES[wire](await capture(report))
    found = differences(report, reading)
    departure = DEPARTURES.get((wire, case.name))
    if departure is None:
        assert found == {}, f"{adapter} and the {wire} SDK read {case} differently: {found}"
    else:
        assert set(found) == departure.aspects, (
            f"{adapter}, {case}: the table says dsh departs in {sorted(departure.aspects)} "
            f"({departure.why}); it differs in {found or 'nothing: drop the entry'}"
        )
