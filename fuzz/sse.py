"""Fuzz the SSE parser: no exception but ``LlmError``, and reads of any size give the events
one read gives (the parser keeps state across reads: CR/LF pairs, partial lines, sizes)."""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from dsh.llm._sse import SseEvent, SseParser
    from dsh.values._errors import LlmError


def _events(reads: list[bytes], limit: int | None) -> tuple[list[SseEvent], bool]:
    parser = SseParser(limit)
    events: list[SseEvent] = []
    try:
        for read in reads:
            events += parser.feed(read)
    except LlmError:
        return events, True
    return events, False


def one_input(raw: bytes) -> None:
    data = atheris.FuzzedDataProvider(raw)
    limit = data.ConsumeIntInRange(0, 4096) or None
    cuts = sorted(data.ConsumeIntInRange(0, 512) for _ in range(data.ConsumeIntInRange(0, 6)))
    body = data.ConsumeBytes(data.remaining_bytes())
    whole, whole_failed = _events([body], None)
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    split, _ = _events(pieces, None)
    if split != whole:
        raise AssertionError(f"split reads gave other events: {split!r} != {whole!r}")
    assert not whole_failed  # without a size limit nothing fails
    # With a limit, what came out before the failure is a prefix of the whole.
    bounded, _ = _events(pieces, limit)
    assert bounded == whole[: len(bounded)], "a size limit changed the events before it"


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
