"""The exact bytes the mock server answers to a request an adapter sent in a kit case."""

from __future__ import annotations

import asyncio

import aiohttp

from dsh.testing.conformance import API_KEY, DEADLINE_S, CaseReport
from dsh.testing.mockserver import MockServer
from dsh.testing.mockserver.wire import KEEP_ALIVE, frame_bytes

from .sdk_referees import Ending, Served

__all__ = ["capture"]

_KEEP_ALIVE = KEEP_ALIVE.encode()


def _auth(report: CaseReport) -> dict[str, str]:
    if report.wire == "anthropic":
        return {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    return {"Authorization": f"Bearer {API_KEY}"}


async def capture(report: CaseReport) -> Served:
    """Post the first request ``report``'s adapter sent, to the path it sent it to, to a fresh
    mock server with the case's scenario queued, and keep the answer's bytes as they arrive.

    The body is read to its end — or, where the scenario's answer never ends (a stall, or
    keep-alive comments forever), until its frames came (and, for keep-alives, one comment
    after them). The bytes must be the frames the kit held the adapter to
    (``report.scenario``): the adapter was served these bytes."""
    scenario = report.scenario
    assert scenario is not None and report.paths, f"{report.case}: no request to replay"
    frames = b"".join(frame_bytes(frame) for frame in scenario.frames)
    streams = scenario.status == 200 and scenario.event_stream
    endless = streams and scenario.ending in ("stall", "keep-alive")
    async with MockServer(api_key=API_KEY) as server, aiohttp.ClientSession() as session:
        server.queue(report.case.scenario)
        async with (
            asyncio.timeout(DEADLINE_S),
            session.post(
                server.url + report.paths[0], json=report.requests[0], headers=_auth(report)
            ) as response,
        ):
            body = bytearray()
            ending: Ending = "close"
            try:
                async for piece in response.content.iter_any():
                    body += piece
                    if endless and _came(body, frames, scenario.ending):
                        ending = scenario.ending
                        break
            except aiohttp.ClientPayloadError:
                ending = "disconnect"
            headers = tuple(response.headers.items())
            status = response.status
    if streams:
        assert bytes(body[: len(frames)]) == frames, f"{report.case}: other bytes than the kit's"
    return Served(status, headers, bytes(body), ending)


def _came(body: bytearray, frames: bytes, ending: str) -> bool:
    if len(body) < len(frames):
        return False
    return ending == "stall" or _KEEP_ALIVE in body[len(frames) :]
