"""The streamed transcripts of the DeepSeek wire reference (``deepseek-wire.md`` §4), replayed
byte for byte where the reference has a verbatim capture (elided middles are filled with
plausible deltas), plus the edge shapes of its §6 checklist.

Each function returns the :class:`Scenario` of one transcript; the adapter tests hold the exact
StreamChunk sequence each one must produce.
"""

from __future__ import annotations

from dsh.testing.mockserver.scenario import Scenario
from dsh.testing.mockserver.wire import (
    DONE_FRAME,
    KEEP_ALIVE,
    ChunkStyle,
    data_frame,
    dumps,
    usage_json,
)

__all__ = [
    "PLAIN_FORMS",
    "V3_TOOL_ARGUMENTS",
    "data_after_done",
    "done_whitespace",
    "finish_with_content",
    "finish_without_delta",
    "framing_fields",
    "invalid_utf8",
    "keep_alive",
    "reasoning_only",
    "text",
    "text_v4",
    "thinking",
    "thinking_length",
    "tool_call_thinking",
    "tool_calls_one_chunk",
    "tool_calls_parallel",
    "usage_choices_null",
    "usage_no_choices",
    "usage_running",
    "usage_trailing",
]

_V3_FINGERPRINT = "fp_eaab8d114b_prod0820_fp8_kvcache"
_V4_FLASH = "a26a7955944dc5c60445bff77fac9c8e"
_V4_PRO = "a307abda487cd1b463329ccb945ce396"
_THINKING_START = {"role": "assistant", "content": None, "reasoning_content": ""}
_THINKING_END = {"content": "", "reasoning_content": None}


def _v3_fragments(city: str) -> list[str]:
    """§4.3: the argument fragments of one of the two parallel calls, in wire order."""
    return f'{{|"|location|"|: |"|{city}|"|, |"|format|"|: |"|c|elsius|"|}}'.split("|")


V3_TOOL_ARGUMENTS = (_v3_fragments("北京"), _v3_fragments("洛阳"))


def _reasoning(piece: str) -> dict[str, object]:
    return {"content": None, "reasoning_content": piece}


def _content(piece: str) -> dict[str, object]:
    return {"content": piece, "reasoning_content": None}


def text() -> Scenario:
    """§4.1 verbatim: ``deepseek-chat`` (V3.2), no ``stream_options``: usage only on the last
    chunk, absent elsewhere."""
    style = ChunkStyle(
        "b6f14fd5-b8d2-4fad-8afd-cfd177866359",
        "deepseek-chat",
        1764681616,
        _V3_FINGERPRINT,
        usage_null=False,
    )
    usage = usage_json(12, 11)
    return Scenario(
        "text",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"content": "Hello"}),
            style.chunk({"content": "!"}),
            style.chunk({"content": " How can I help you today?"}),
            style.chunk({"content": " 😊"}),
            style.chunk({"content": ""}, "stop", usage),
            DONE_FRAME,
        ),
    )


def text_v4() -> Scenario:
    """§4.1 composite: V4 with thinking disabled and ``include_usage``: ``"usage": null`` on
    every chunk until the finish chunk."""
    style = ChunkStyle(
        "0b3c1f5e-2d7a-4b8e-9a61-5f2f0c9d7e11", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    return Scenario(
        "text-v4",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"content": "Hi"}),
            style.chunk({"content": " there!"}),
            style.chunk({"content": ""}, "stop", usage_json(88, 4, reasoning=0)),
            DONE_FRAME,
        ),
    )


def _pro_style() -> ChunkStyle:
    return ChunkStyle(
        "d6611601-c1b0-47ba-9dea-b05359fa7e24", "deepseek-v4-pro", 1787605943, _V4_PRO
    )


def thinking() -> Scenario:
    """§4.2: the empty ``reasoning_content`` first chunk, reasoning, then content."""
    style = _pro_style()
    return Scenario(
        "thinking",
        (
            style.chunk(_THINKING_START),
            style.chunk(_reasoning("We")),
            style.chunk(_reasoning(" need")),
            style.chunk(_reasoning(" to compare 9.11 and 9.8.")),
            style.chunk(_content("9.8")),
            style.chunk(_content(" is greater.")),
            style.chunk(_THINKING_END, "stop", usage_json(87, 21, reasoning=14)),
            DONE_FRAME,
        ),
    )


def thinking_length() -> Scenario:
    """§4.2: a V4 Pro stream stopped by ``length`` while still reasoning."""
    style = _pro_style()
    return Scenario(
        "thinking-length",
        (
            style.chunk(_THINKING_START),
            style.chunk(_reasoning("We")),
            style.chunk(_reasoning(" need")),
            style.chunk(_THINKING_END, "length", usage_json(87, 2, reasoning=2)),
            DONE_FRAME,
        ),
    )


def tool_calls_parallel() -> Scenario:
    """§4.3 verbatim (fragments as listed): text, then two calls streamed one after the other,
    id/type/name only on each call's first fragment; no ``stream_options``."""
    style = ChunkStyle(
        "750800d8-716c-40da-ba87-c46db32cf8a3",
        "deepseek-chat",
        1764681305,
        _V3_FINGERPRINT,
        usage_null=False,
    )
    frames = [
        style.chunk({"role": "assistant", "content": ""}),
        style.chunk({"content": "我可以"}),
        style.chunk({"content": "同时查询两个城市的天气。"}),
    ]
    ids = ("call_00_JQSxFX1xOHGH6ajdpN88RMXO", "call_01_L8UtYbkfaMFr7hzsToGPWGfI")
    for index, (call_id, fragments) in enumerate(zip(ids, V3_TOOL_ARGUMENTS, strict=True)):
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": "get_current_weather", "arguments": ""},
        }
        frames.append(style.chunk({"tool_calls": [head]}))
        frames += [
            style.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in fragments
        ]
    usage = usage_json(491, 129, hits=448)
    frames += [style.chunk({"content": ""}, "tool_calls", usage), DONE_FRAME]
    return Scenario("tool-calls-parallel", tuple(frames))


def tool_call_thinking() -> Scenario:
    """§4.3, V4 thinking mode: reasoning, then one call (the head is the verbatim capture); the
    tool-call chunks carry neither ``content`` nor ``reasoning_content``."""
    style = ChunkStyle(
        "6e77be01-935b-42f6-8b05-d6c763528589", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    head = {
        "index": 0,
        "id": "call_00_IhCAliIHtM9gKpgfqbBV9873",
        "type": "function",
        "function": {"name": "weather", "arguments": ""},
    }
    frames = [
        style.chunk(_THINKING_START),
        style.chunk(_reasoning("The user wants the weather")),
        style.chunk(_reasoning(" in Hangzhou.")),
        style.chunk({"tool_calls": [head]}),
    ]
    frames += [
        style.chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in ('{"', "city", '":"', "Hangzhou", '"}')
    ]
    usage = usage_json(374, 61, hits=256, reasoning=17)
    frames += [style.chunk(_THINKING_END, "tool_calls", usage), DONE_FRAME]
    return Scenario("tool-call-thinking", tuple(frames))


def tool_calls_one_chunk() -> Scenario:
    """§4.3 (DSH shape): both calls' first fragments in one chunk, later fragments interleaved
    out of order; only the wire index tells them apart."""
    style = ChunkStyle(
        "3f1c9a52-0b7e-4d1a-8c55-2b9e6f0d4a17", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    heads = [
        {
            "index": 0,
            "id": "call_00_a",
            "type": "function",
            "function": {"name": "get_date", "arguments": ""},
        },
        {
            "index": 1,
            "id": "call_01_b",
            "type": "function",
            "function": {"name": "get_time", "arguments": ""},
        },
    ]
    return Scenario(
        "tool-calls-one-chunk",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"tool_calls": heads}),
            style.chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"tz":'}}]}),
            style.chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            style.chunk({"tool_calls": [{"index": 1, "function": {"arguments": '"UTC"}'}}]}),
            style.chunk({"content": ""}, "tool_calls", usage_json(40, 20, reasoning=0)),
            DONE_FRAME,
        ),
    )


def usage_trailing() -> Scenario:
    """§4.4 (b): the finish chunk has ``"usage": null``; usage comes in a trailing chunk with
    ``"choices": []``."""
    style = ChunkStyle(
        "7d2e4b1a-9c3f-4e8d-b6a5-1f0e2d3c4b5a", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    return Scenario(
        "usage-trailing",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"content": "Hi"}),
            style.chunk(_THINKING_END, "stop"),
            style.usage_only(usage_json(9, 1)),
            DONE_FRAME,
        ),
    )


def usage_running() -> Scenario:
    """§4.4 (c): a third-party host that puts running usage (from zero) on every chunk; only the
    last counts."""
    style = ChunkStyle(
        "c0ffee00-1234-4abc-9def-0123456789ab",
        "deepseek-ai/DeepSeek-R1",
        1786782779,
        "",
        usage_null=False,
    )

    def running(completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": 10,
            "completion_tokens": completion,
            "total_tokens": 10 + completion,
        }

    return Scenario(
        "usage-running",
        (
            style.chunk(_THINKING_START, usage=running(0)),
            style.chunk(_reasoning("Hmm"), usage=running(1)),
            style.chunk(_content("Hello"), usage=running(2)),
            style.chunk(_THINKING_END, "stop", running(3)),
            DONE_FRAME,
        ),
    )


def keep_alive() -> Scenario:
    """§4.5: keep-alive comments while the request waits, and between data chunks."""
    style = ChunkStyle(
        "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    return Scenario(
        "keep-alive",
        (
            KEEP_ALIVE,
            KEEP_ALIVE,
            style.chunk(_THINKING_START),
            KEEP_ALIVE,
            style.chunk(_reasoning("Let")),
            style.chunk(_reasoning(" me think.")),
            KEEP_ALIVE,
            style.chunk(_content("Done.")),
            style.chunk(_THINKING_END, "stop", usage_json(20, 6, reasoning=4)),
            DONE_FRAME,
        ),
    )


def finish_with_content() -> Scenario:
    """§6.4: the finish chunk carries the last text fragment (``length`` in the live capture)."""
    style = ChunkStyle(
        "9e8d7c6b-5a4f-4e3d-2c1b-0a9f8e7d6c5b", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    return Scenario(
        "finish-with-content",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"content": "Once upon"}),
            style.chunk({"content": " a time"}, "length", usage_json(30, 4, reasoning=0)),
            DONE_FRAME,
        ),
    )


def finish_without_delta() -> Scenario:
    """§6.5: the finish chunk has no ``delta`` key at all."""
    style = ChunkStyle(
        "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    return Scenario(
        "finish-without-delta",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"content": "OK"}),
            style.chunk(None, "stop", usage_json(5, 1, reasoning=0)),
            DONE_FRAME,
        ),
    )


def reasoning_only() -> Scenario:
    """§6.14: V4 Flash answers a greeting entirely in ``reasoning_content``: a success."""
    style = ChunkStyle(
        "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    return Scenario(
        "reasoning-only",
        (
            style.chunk(_THINKING_START),
            style.chunk(_reasoning("Just a greeting.")),
            style.chunk(_THINKING_END, "stop", usage_json(8, 4, reasoning=4)),
            DONE_FRAME,
        ),
    )


def data_after_done() -> Scenario:
    """§6.20: whatever follows ``[DONE]`` is ignored."""
    style = ChunkStyle(
        "3c4d5e6f-7a8b-4c9d-0e1f-2a3b4c5d6e7f", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    return Scenario(
        "data-after-done",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"content": "Bye"}),
            style.chunk({"content": ""}, "stop", usage_json(5, 1, reasoning=0)),
            DONE_FRAME,
            style.chunk({"content": " and more"}),
            f"data: {dumps({'not': 'a chunk'})}\n\n",
        ),
    )


# -- framing that only proxies send: each is its plain form with one thing changed -----------


def framing_fields() -> Scenario:
    """``text-v4`` with the SSE fields a proxy adds: ``id:`` and ``event:`` lines on the data
    events, a ``retry:``-only event, and keep-alive comments after an id was set. WHATWG SSE
    says to ignore them for the data; an event with no data is not dispatched."""
    plain = text_v4().frames
    return Scenario(
        "framing-fields",
        (
            f"id: 1\nevent: message\n{plain[0]}",
            "retry: 3000\n\n",
            f"id: 2\n{plain[1]}",
            KEEP_ALIVE,
            "id: 3\n\n",
            f"event: delta\nid: 4\n{plain[2]}",
            KEEP_ALIVE,
            f"id: 5\n{plain[3]}",
            plain[4],
        ),
    )


def done_whitespace() -> Scenario:
    """``text-v4`` whose ``[DONE]`` carries trailing whitespace."""
    return Scenario("done-whitespace", (*text_v4().frames[:-1], "data: [DONE] \t\n\n"))


def _usage_only(choices: object) -> str:
    """The trailing usage-only chunk of ``usage-trailing`` with ``choices`` set to
    ``choices`` (:data:`_NO_CHOICES`: the key left out)."""
    payload: dict[str, object] = {
        "id": "7d2e4b1a-9c3f-4e8d-b6a5-1f0e2d3c4b5a",
        "object": "chat.completion.chunk",
        "created": 1786782779,
        "model": "deepseek-v4-flash",
        "system_fingerprint": _V4_FLASH,
    }
    if choices is not _NO_CHOICES:
        payload["choices"] = choices
    payload["usage"] = usage_json(9, 1)
    return data_frame(payload)


_NO_CHOICES = object()


def usage_choices_null() -> Scenario:
    """``usage-trailing`` whose usage-only chunk has ``"choices": null``."""
    frames = usage_trailing().frames
    return Scenario("usage-choices-null", (*frames[:-2], _usage_only(None), frames[-1]))


def usage_no_choices() -> Scenario:
    """``usage-trailing`` whose usage-only chunk has no ``choices`` key at all."""
    frames = usage_trailing().frames
    return Scenario("usage-no-choices", (*frames[:-2], _usage_only(_NO_CHOICES), frames[-1]))


def invalid_utf8(plain: bool = False) -> Scenario:
    """A text answer with a byte that is not UTF-8 (``0xE9``, Latin-1 "é") inside its content;
    ``plain``: its plain form, with U+FFFD where the byte was (what a decoder must make of
    it)."""
    style = ChunkStyle(
        "4d5e6f7a-8b9c-4d0e-1f2a-3b4c5d6e7f8a", "deepseek-v4-flash", 1786782779, _V4_FLASH
    )
    # U+FFFD, or a lone surrogate, which frame_bytes sends as the raw byte 0xE9.
    broken = chr(0xFFFD) if plain else chr(0xDCE9)
    return Scenario(
        "invalid-utf8",
        (
            style.chunk({"role": "assistant", "content": ""}),
            style.chunk({"content": "Caf"}),
            style.chunk({"content": f"{broken} au lait"}),
            style.chunk({"content": ""}, "stop", usage_json(6, 3, reasoning=0)),
            DONE_FRAME,
        ),
    )


#: Each framing variant → the scenario it must give the same chunks as.
PLAIN_FORMS = {
    "framing-fields": text_v4,
    "done-whitespace": text_v4,
    "usage-choices-null": usage_trailing,
    "usage-no-choices": usage_trailing,
    "invalid-utf8": lambda: invalid_utf8(plain=True),
}
