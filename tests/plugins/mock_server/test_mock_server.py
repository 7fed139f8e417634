"""The mock server: choosing scenarios, streaming and non-streaming answers, endings, control."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from dsh.llm._sse import parse_sse
from dsh.testing.mockserver import SCENARIOS, MockServer, Scenario, completion_json, reply
from dsh.testing.mockserver.catalogue import delta_text

from .conftest import Post, chat


def contents(answer_text: str) -> str:
    """The text content of a streamed answer."""
    pieces = []
    for event in parse_sse(answer_text.encode()):
        payload = json.loads(event.data)
        for choice in payload["choices"]:
            pieces.append((choice.get("delta") or {}).get("content") or "")
    return "".join(pieces)


async def test_it_listens_on_loopback_and_closes_twice_quietly() -> None:
    server = MockServer()
    await server.start()
    assert server.url.startswith("http://127.0.0.1:")
    await server.close()
    await server.close()


async def test_queued_scenarios_come_first_then_the_header_then_the_conversation(
    post: Post, mock_server: MockServer
) -> None:
    mock_server.queue("text", reply(text="custom"), lambda body: reply(text=body["model"]))
    assert mock_server.queued == 3
    assert contents((await post(chat())).text) == "Hello! How can I help you today? 😊"
    assert contents((await post(chat())).text) == "custom"
    assert contents((await post(chat())).text) == "deepseek-flash"
    headed = await post(chat(), headers={"Authorization": "Bearer k", "X-Mock-Scenario": "text-v4"})
    assert contents(headed.text) == "Hi there!"
    assert contents((await post(chat())).text).startswith('You said: "hi"')


async def test_requests_are_recorded_and_answers_carry_a_trace_id_as_deepseek_sends_it(
    post: Post, mock_server: MockServer
) -> None:
    answer = await post(chat(), path="/v1/chat/completions")
    assert answer.headers["x-ds-trace-id"] == "mock-1"
    assert "x-request-id" not in answer.headers
    mock_server.queue("auth")
    assert (await post(chat())).headers["x-ds-trace-id"] == "mock-2"
    assert answer.headers["Content-Type"] == "text/event-stream"
    recorded = mock_server.requests[0]
    assert (recorded.path, recorded.body["model"]) == ("/v1/chat/completions", "deepseek-flash")
    assert recorded.headers["Authorization"] == "Bearer k"


def test_unknown_scenario_names_fail_when_queued() -> None:
    server = MockServer()
    with pytest.raises(ValueError, match="unknown mock scenario 'nope'; known scenarios: auth"):
        server.queue("nope")
    with pytest.raises(ValueError, match="unknown mock scenario None"):
        server.queue({"retry_after": "1"})
    assert server.queued == 0


async def test_http_errors_carry_their_headers(post: Post, mock_server: MockServer) -> None:
    mock_server.queue({"name": "rate-limit", "retry_after": "7"})
    answer = await post(chat())
    assert (answer.status, answer.headers["Retry-After"]) == (429, "7")
    assert answer.error() == "Rate Limit Reached"


async def test_every_named_scenario_can_be_served(post: Post, mock_server: MockServer) -> None:
    endless = {"stall", "keep-alive-stall", "queued-stall", "disconnect"}
    for name in sorted(set(SCENARIOS) - endless):
        mock_server.queue(name)
        answer = await post(chat())
        assert answer.status in (200, 400, 401, 402, 422, 429, 500, 503), name


async def test_the_long_text_scenario_has_exactly_the_chunks_asked_for(
    post: Post, mock_server: MockServer
) -> None:
    mock_server.queue({"name": "long-text", "chunks": 50})
    events = parse_sse((await post(chat())).text.encode())
    assert len(events) == 1 + 50 + 1


async def test_a_disconnect_breaks_the_body(mock_server: MockServer) -> None:
    mock_server.queue("disconnect")
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{mock_server.url}/chat/completions",
            json=chat(),
            headers={"Authorization": "Bearer k"},
        )
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()


@pytest.mark.parametrize("name", ["stall", "keep-alive-stall"])
async def test_stalls_hold_the_answer_open_until_the_server_closes_it(name: str) -> None:
    server = MockServer()
    await server.start()
    server.queue(name)
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{server.url}/chat/completions", json=chat(), headers={"Authorization": "Bearer k"}
        )
        first = await response.content.readany()
        assert first.startswith(b"data: ")
        reading = asyncio.create_task(response.read())
        await asyncio.sleep(0.03)
        assert not reading.done()
        await server.close()
        rest = await reading
    assert b"[DONE]" not in first + rest


async def test_a_client_leaving_a_keep_alive_stall_is_noticed(mock_server: MockServer) -> None:
    mock_server.queue({"name": "keep-alive-stall", "interval_s": 0.005})
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{mock_server.url}/chat/completions",
            json=chat(),
            headers={"Authorization": "Bearer k"},
        )
        await response.content.readany()
        response.close()
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()


# -- non-streaming -------------------------------------------------------------------------------


async def test_non_streaming_answers_fold_the_stream(post: Post, mock_server: MockServer) -> None:
    mock_server.queue("tool-call-thinking")
    answer = await post(chat(stream=False))
    assert answer.headers["Content-Type"] == "application/json"
    completion = json.loads(answer.text)
    (choice,) = completion["choices"]
    assert completion["object"] == "chat.completion"
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "The user wants the weather in Hangzhou.",
        "tool_calls": [
            {
                "id": "call_00_IhCAliIHtM9gKpgfqbBV9873",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Hangzhou"}'},
            }
        ],
    }
    assert completion["usage"]["prompt_cache_hit_tokens"] == 256


async def test_non_streaming_keep_alives_are_blank_lines_before_the_body(
    post: Post, mock_server: MockServer
) -> None:
    mock_server.queue("keep-alive")
    answer = await post(chat(stream=False))
    assert answer.text.startswith("\n\n\n\n{")
    assert json.loads(answer.text)["choices"][0]["message"]["content"] == "Done."


async def test_a_malformed_non_streaming_body_is_sent_as_it_is(
    post: Post, mock_server: MockServer
) -> None:
    mock_server.queue("malformed-json")
    answer = await post(chat(stream=False))
    assert answer.text.startswith('{"id":"x"')


async def test_a_client_leaving_a_non_streaming_stall_is_noticed(mock_server: MockServer) -> None:
    mock_server.queue({"name": "keep-alive-stall", "interval_s": 0.005})
    async with aiohttp.ClientSession() as session:
        body = chat(stream=False)
        response = await session.post(
            f"{mock_server.url}/chat/completions", json=body, headers={"Authorization": "Bearer k"}
        )
        await response.content.readany()
        response.close()
    async with asyncio.timeout(10):  # noticed at once: this only bounds a hang
        await mock_server.client_gone()


def test_an_answer_without_frames_folds_to_an_empty_completion() -> None:
    completion = json.loads(completion_json(Scenario("nothing")))
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": ""}
    assert completion["id"] is None


# -- control endpoints ---------------------------------------------------------------------------


async def test_scenarios_can_be_queued_over_http(post: Post, mock_server: MockServer) -> None:
    queued = await post(["text", {"name": "rate-limit", "retry_after": "1"}], path="/mock/queue")
    assert json.loads(queued.text) == {"queued": 2}
    assert contents((await post(chat())).text).startswith("Hello!")
    assert (await post(chat())).status == 429


@pytest.mark.parametrize("payload", [{"name": "text"}, ["nope"]])
async def test_bad_queue_requests_are_refused(payload: object, post: Post) -> None:
    answer = await post(payload, path="/mock/queue")
    assert answer.status == 400


async def test_models_are_listed(mock_server: MockServer) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{mock_server.url}/models") as r:
        listed = await r.json()
    assert [m["id"] for m in listed["data"]] == list(mock_server.models)


async def test_shutdown_over_http_ends_wait_closed(post: Post, mock_server: MockServer) -> None:
    waiting = asyncio.create_task(mock_server.wait_closed())
    await post({}, path="/mock/shutdown")
    async with asyncio.timeout(10):  # closed at once: this only bounds a hang
        await waiting


async def test_stats_count_served_and_queued(post: Post, mock_server: MockServer) -> None:
    mock_server.queue("text", "text")
    await post(chat())
    url = f"{mock_server.url}/mock/stats"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        stats = await response.json()
    assert stats == {"served": 1, "queued": 1, "disconnects": 0}


# -- benchmark scenarios ---------------------------------------------------------------------


async def test_deltas_stream_exactly_the_requested_pieces(
    post: Post, mock_server: MockServer
) -> None:
    mock_server.queue({"name": "deltas", "chunks": 7})
    answer = await post(chat())
    pieces = [
        json.loads(e.data)["choices"][0]["delta"].get("content")
        for e in parse_sse(answer.text.encode())
        if e.data != "[DONE]"
    ]
    assert [p for p in pieces if p] == [" héj", " wöl", " 日本語", " abc", " ü12", " ok!", " héj"]
    assert contents(answer.text) == delta_text(7)


async def test_tool_loop_calls_until_enough_results(post: Post, mock_server: MockServer) -> None:
    def tool_calls(answer_text: str) -> list[str]:
        names = []
        for event in parse_sse(answer_text.encode()):
            if event.data == "[DONE]":
                continue
            for call in json.loads(event.data)["choices"][0]["delta"].get("tool_calls") or []:
                names.append(call.get("id"))
        return [name for name in names if name]

    mock_server.queue({"name": "tool-loop", "steps": 1}, {"name": "tool-loop", "steps": 1})
    first = await post(chat())
    assert tool_calls(first.text) == ["call_0"]
    call = {"id": "call_0", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": "step 0"},
    ]
    second = await post(chat(history, thinking={"type": "disabled"}))
    assert contents(second.text) == "finished after 1 steps"
