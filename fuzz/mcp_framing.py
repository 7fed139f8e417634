"""Fuzz the MCP stdio framing: what a server writes, cut into reads anywhere, gives the same
messages whatever the cuts, the reader never holds more than its limit, and each message is
parsed into a JSON-RPC message or the error the session logs — or ends the connection with
``McpError`` (too long, too deep), never another exception."""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from dsh_plugins.mcp.config import McpError
    from dsh_plugins.mcp.stdio import LineReader, parse


def _lines(reads: list[bytes], limit: int) -> tuple[list[bytes], bool, int]:
    reader = LineReader(limit)
    lines: list[bytes] = []
    for read in reads:
        if reader.failure is not None:  # the transport reads no more once it failed
            break
        lines += reader.feed(read)
    return lines, reader.failure is not None, reader.peak


def one_input(raw: bytes) -> None:
    data = atheris.FuzzedDataProvider(raw)
    limit = data.ConsumeIntInRange(1, 2048)
    cuts = sorted(data.ConsumeIntInRange(0, 4096) for _ in range(data.ConsumeIntInRange(0, 6)))
    body = data.ConsumeBytes(data.remaining_bytes())
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    whole, whole_failed, _ = _lines([body], limit)
    split, split_failed, peak = _lines(pieces, limit)
    assert peak <= limit, f"the reader held {peak} bytes, over its limit {limit}"
    assert split_failed == whole_failed, "cutting the reads changed whether the limit was hit"
    assert split == whole, "cutting the reads changed the messages"
    for line in whole:
        with contextlib.suppress(McpError):
            parse(line)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
