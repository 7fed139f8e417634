"""A read's payloads translated at once give what each payload fed alone gives.

:meth:`ChunkTranslator.translate` is a speed trick: it translates the common payload (one delta
of text or reasoning for a block already open) inline and keeps a run of such deltas as one
:class:`~dsh.llm._batches.Deltas`. :meth:`ChunkTranslator.feed`, payload by payload, is the
reference. For any stream of payloads (every shape DeepSeek sends, and malformed ones), split
into reads anyhow: the chunks (runs expanded), the failure and where it came, and the blocks
``done`` closes with are the same.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from dsh.llm._batches import ChunkBatch, Deltas, expand
from dsh.llm._http import decode_payload
from dsh.values._chunks import LlmFailure, StreamChunk, TextDelta
from dsh.values._errors import LlmError
from dsh_plugins.llm_deepseek.stream import ChunkTranslator

_TEXT = st.sampled_from(["", "a", "héj", "日本", " ok"]) | st.text(max_size=4)


def _chunk(choice: Any, **top: Any) -> bytes:
    return orjson.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [choice], **top})


@st.composite
def _payloads(draw: st.DrawFn) -> bytes | str:
    kind = draw(
        st.sampled_from(
            [
                "text",
                "text",
                "text",
                "reasoning",
                "reasoning",
                "text-and-reasoning",
                "role",
                "tool",
                "usage",
                "finish",
                "usage-on-delta",
                "error",
                "odd",
                "not-json",
                "text-as-str",
            ]
        )
    )
    text = draw(_TEXT)
    if kind == "text":
        return _chunk({"index": 0, "delta": {"content": text}, "finish_reason": None})
    if kind == "reasoning":
        delta: dict[str, Any] = {"content": None, "reasoning_content": text}
        return _chunk({"index": 0, "delta": delta, "finish_reason": None})
    if kind == "text-and-reasoning":
        delta = {"content": text, "reasoning_content": draw(st.sampled_from([None, "", "r"]))}
        return _chunk({"index": 0, "delta": delta, "finish_reason": None})
    if kind == "role":
        return _chunk({"index": 0, "delta": {"role": "assistant", "content": text}})
    if kind == "tool":
        fragment: dict[str, Any] = {
            "index": draw(st.integers(0, 1)),
            "id": "c",
            "function": {"arguments": text},
        }
        delta = {
            "content": draw(st.sampled_from([None, "t"])),
            "tool_calls": [fragment],
        }
        return _chunk({"index": 0, "delta": delta})
    if kind == "usage":
        return orjson.dumps({"choices": [], "usage": {"prompt_tokens": 3}})
    if kind == "finish":
        reason = draw(st.sampled_from(["stop", "length", "tool_calls"]))
        return _chunk({"index": 0, "delta": {"content": text}, "finish_reason": reason})
    if kind == "usage-on-delta":
        usage = {"prompt_tokens": 1, "completion_tokens": 2}
        return _chunk({"index": 0, "delta": {"content": text}}, usage=usage)
    if kind == "error":
        return orjson.dumps({"error": {"message": "boom", "type": "server"}})
    if kind == "odd":
        return orjson.dumps(
            draw(
                st.sampled_from(
                    [
                        [],
                        "text",
                        {"choices": "abc"},
                        {"choices": [{"delta": ["x"]}]},
                        {"choices": [{"delta": {"content": 5}}]},
                        {"choices": [{"delta": {"content": ["x"]}}]},
                        {"choices": [{"delta": {"content": None, "reasoning_content": 7}}]},
                        {"choices": [{"delta": {"content": None, "reasoning_content": "r"}}]},
                        {"choices": [{"nodelta": 1}]},
                        {"choices": [5]},
                        {"choices": {}},
                        {"choices": []},
                    ]
                )
            )
        )
    if kind == "not-json":
        return b"{not json"
    payload = _chunk({"index": 0, "delta": {"content": text}})
    return payload.decode()  # a payload the framing gave as text


_DECODE = functools.partial(decode_payload, sender="DeepSeek")


def _reference(payloads: list[bytes | str]) -> tuple[list[StreamChunk], LlmFailure | None, Any]:
    translator, failure = ChunkTranslator(), None
    out: list[StreamChunk] = []
    try:
        for payload in payloads:
            out += translator.feed(_DECODE(payload))
        out += translator.done()
    except LlmError as exc:
        failure = exc.failure
    return out, failure, [(b.index, b.kind, b.parts) for b in translator._blocks]


def _fast(
    payloads: list[bytes | str], cuts: list[int]
) -> tuple[list[StreamChunk], LlmFailure | None, Any, list[ChunkBatch]]:
    points = sorted(cut % (len(payloads) + 1) for cut in cuts)
    reads = [payloads[a:b] for a, b in itertools.pairwise([0, *points, len(payloads)])]
    translator, failure = ChunkTranslator(), None
    batches: list[ChunkBatch] = []
    try:
        for read in reads:
            batch: ChunkBatch = []
            batches.append(batch)
            translator.translate(read, batch, _DECODE)
        batches.append([*translator.done()])
    except LlmError as exc:
        failure = exc.failure
    chunks = [chunk for batch in batches for chunk in expand(batch)]
    parts = [(b.index, b.kind, b.parts) for b in translator._blocks]
    return chunks, failure, parts, batches


@given(st.lists(_payloads(), max_size=30), st.lists(st.integers(min_value=0), max_size=5))
@example([_chunk({"delta": {"content": "a"}})] * 3, [])
@example(  # blocks open, then runs of one after runs of the other, in one read
    [
        _chunk({"delta": {"content": "a"}}),
        _chunk({"delta": {"content": None, "reasoning_content": "r"}}),
        *[_chunk({"delta": {"content": "b"}})] * 2,
        *[_chunk({"delta": {"content": None, "reasoning_content": "s"}})] * 2,
        _chunk({"delta": {"content": "c"}}),
    ],
    [],
)
def test_translating_a_read_at_once_gives_what_feeding_each_payload_gives(
    payloads: list[bytes | str], cuts: list[int]
) -> None:
    chunks, failure, parts, _ = _fast(payloads, cuts)
    assert (chunks, failure, parts) == _reference(payloads)


def test_a_run_of_text_deltas_is_one_item_of_its_batch() -> None:
    first = _chunk({"index": 0, "delta": {"role": "assistant", "content": "a"}})
    rest = [_chunk({"index": 0, "delta": {"content": t}}) for t in ("b", "c", "d")]
    _, failure, _, batches = _fast([first, *rest], [])
    assert failure is not None  # no finish reason: the stream is malformed at done()
    run = batches[0][-1]
    assert isinstance(run, Deltas)
    assert (run.kind, run.index, run.texts) == (TextDelta, 0, ["b", "c", "d"])
