"""``dsh models --refresh PROVIDER``: a provider's model list endpoint read over loopback HTTP
(OpenAI-compatible ``GET /models``, the Messages API's paged ``GET /v1/models``), cached in the
user config directory, used for capabilities and listing; a table entry still overrides."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from dsh import hookimpl
from dsh.app import _modelcache as modelcache
from dsh.app._harness import Harness
from dsh.app._userconfig import UserConfigError
from dsh.cli import main
from dsh.llm._service import DeferredAdapter, ModelInfo
from dsh.testing import ScriptedAdapter
from dsh.values._errors import LlmError
from dsh.values._tokens import PeakHours, Price, PriceSchedule
from dsh_plugins.llm_anthropic.listing import page_of
from dsh_plugins.llm_providers.listing import listed_models

Handler = Callable[[web.Request], Any]

OPENROUTER_MODELS = {
    "data": [
        {
            "id": "anthropic/claude-sonnet-4",
            "context_length": 200_000,
            "architecture": {"input_modalities": ["text", "image"]},
            "top_provider": {"max_completion_tokens": 64_000},
            "pricing": {"prompt": "0.000003", "completion": "0.000015", "input_cache_read": "3e-7"},
            "supported_parameters": ["tools", "reasoning", "response_format"],
        },
        {
            "id": "meta/tiny",
            "context_length": 8_192,
            "architecture": {"input_modalities": ["text"]},
            "pricing": {"prompt": "-1", "completion": "-1"},
            "supported_parameters": ["temperature"],
        },
        {"id": 7},
        "not an entry",
    ]
}


class Loopback:
    """An aiohttp app on 127.0.0.1 in a thread of its own, so that the CLI (which runs its own
    event loop) can call it; ``seen`` holds each request's path, query and headers."""

    def __init__(self, routes: dict[str, Handler]) -> None:
        self.seen: list[tuple[str, dict[str, str], dict[str, str]]] = []
        app = web.Application()
        for path, handler in routes.items():
            app.router.add_get(path, self._recording(handler))
        self._runner = web.AppRunner(app)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]

    def _recording(self, handler: Handler) -> Handler:
        async def record(request: web.Request) -> Any:
            self.seen.append((request.path, dict(request.query), dict(request.headers)))
            return await handler(request)

        return record

    def __enter__(self) -> Loopback:
        self._thread.start()

        async def start() -> None:
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

        asyncio.run_coroutine_threadsafe(start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def answer(payload: Any, status: int = 200) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        if isinstance(payload, bytes):
            return web.Response(body=payload, status=status, content_type="text/plain")
        return web.json_response(payload, status=status)

    return handle


@pytest.fixture(autouse=True)
def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    yield
    structlog.reset_defaults()  # the CLI configures logging process-wide


def configure(text: str) -> None:
    Path("dsh.toml").write_text(text, encoding="utf-8")


def openrouter_at(url: str, models: str = "") -> None:
    configure(f'[llm_providers.openrouter]\nbase_url = "{url}/v1"\nidle_timeout_s = 30\n{models}')


def anthropic_at(url: str) -> None:
    configure(f'[llm_anthropic]\nanthropic_base_url = "{url}"\nidle_timeout_s = 30\n')


# -- OpenAI-compatible providers --------------------------------------------------------------


def test_refresh_caches_what_openrouter_lists_and_dsh_models_shows_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with Loopback({"/v1/models": answer(OPENROUTER_MODELS)}) as server:
        openrouter_at(server.url)
        assert main(["models", "--refresh", "openrouter"]) == 0
    out = capsys.readouterr().out
    assert "2 models of openrouter cached in" in out
    headers = server.seen[0][2]
    assert headers["Authorization"] == "Bearer sk-or-test"
    cached = json.loads(modelcache.cache_path("openrouter").read_text())
    assert cached["provider"] == "openrouter"
    assert cached["models"]["anthropic/claude-sonnet-4"] == {
        "context_window": 200_000,
        "max_output_tokens": 64_000,
        "image_input": True,
        "json_mode": True,
        "tools": True,
        "price": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 0.0},
    }
    assert cached["models"]["meta/tiny"] == {
        "context_window": 8192,
        "image_input": False,
        "json_mode": False,
        "tools": False,
    }
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    row = next(
        line for line in table.splitlines() if "openrouter/anthropic/claude-sonnet-4" in line
    )
    assert row.split()[1:6] == ["200K", "64K", "yes", "?", "3/15"]
    assert "openrouter/meta/tiny" in table
    assert "and any model under anthropic/*, deepseek-anthropic/*, openrouter/*" in table


def test_a_cached_model_gets_the_reported_capabilities_and_the_table_still_overrides() -> None:
    listed = {
        "a/listed": ModelInfo(context_window=50_000, image_input=True, tools=False),
        "a/both": ModelInfo(context_window=1_000),
    }
    modelcache.write("openrouter", listed)
    configure("[llm_providers.openrouter.models.'a/both']\ncontext_window = 9000\n")
    harness = Harness(config="dsh.toml")
    harness.load()
    assert "openrouter/a/listed" in harness.llm.models()
    info = harness.llm.model_info("openrouter/a/listed")
    assert info is not None and (info.context_window, info.image_input) == (50_000, True)
    both = harness.llm.model_info("openrouter/a/both")
    assert both is not None and both.context_window == 9000
    adapter: Any = harness.llm.adapter_for("openrouter/a/listed")
    assert adapter.provider.caps("a/listed").tools is False  # so no tool schema is sent
    unknown = harness.llm.model_info("openrouter/x/unlisted")
    assert unknown is not None and unknown.context_window is None


def test_a_refresh_that_fails_says_why_and_keeps_the_old_cache(
    capsys: pytest.CaptureFixture[str],
) -> None:
    modelcache.write("openrouter", {"kept/model": ModelInfo(context_window=10)})
    routes = {
        "/v1/models": answer({"error": {"message": "bad key"}}, 401),
        "/v2/models": answer(b"<html>not json</html>"),
        "/v3/models": answer({"models": []}),
    }
    with Loopback(routes) as server:
        for version, expected in (
            ("v1", "openrouter answered HTTP 401: bad key"),
            ("v2", "openrouter's model list is not JSON"),
            ("v3", "openrouter's model list is not an object with a 'data' list"),
        ):
            configure(f'[llm_providers.openrouter]\nbase_url = "{server.url}/{version}"\n')
            assert main(["models", "--refresh", "openrouter"]) == 1
            assert expected in capsys.readouterr().err
    assert modelcache.read("openrouter") == {"kept/model": ModelInfo(context_window=10)}


def test_refresh_without_a_key_or_a_server_or_an_answer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY")
    configure('[llm_providers.openrouter]\nbase_url = "http://127.0.0.1:9/v1"\n')
    assert main(["models", "--refresh", "openrouter"]) == 1
    assert "no API key for openrouter" in capsys.readouterr().err
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    configure(f'[llm_providers.openrouter]\nbase_url = "http://127.0.0.1:{closed}/v1"\n')
    assert main(["models", "--refresh", "openrouter"]) == 1
    assert "cannot reach openrouter" in capsys.readouterr().err
    with silent_server() as url:
        configure(f'[llm_providers.openrouter]\nbase_url = "{url}/v1"\nidle_timeout_s = 2\n')
        assert main(["models", "--refresh", "openrouter"]) == 1
    assert "no answer from" in capsys.readouterr().err


class silent_server:
    """Accepts connections and never answers: the timeout ends the wait, whenever it comes
    (the outcome does not depend on how long it is)."""

    def __enter__(self) -> str:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def test_vllm_style_lists_and_odd_entries_are_read_with_what_they_report() -> None:
    models = listed_models(
        "vllm",
        {
            "data": [
                {"id": "qwen", "max_model_len": 32_768},
                {"id": "odd", "context_length": True, "pricing": "free", "architecture": []},
                {"id": "half-priced", "pricing": {"prompt": "0.000001"}},
            ]
        },
    )
    assert models["qwen"] == ModelInfo(context_window=32_768)
    assert models["odd"] == ModelInfo()
    assert models["half-priced"].pricing is None
    with pytest.raises(LlmError, match="not an object with a 'data' list"):
        listed_models("vllm", [])


# -- The Messages API -------------------------------------------------------------------------


def anthropic_pages() -> Handler:
    pages = {
        "": {
            "data": [
                {
                    "id": "claude-new",
                    "type": "model",
                    "max_input_tokens": 1_000_000,
                    "max_tokens": 128_000,
                    "capabilities": {
                        "image_input": {"supported": True},
                        "structured_outputs": {"supported": False},
                    },
                }
            ],
            "has_more": True,
            "last_id": "claude-new",
        },
        "claude-new": {
            "data": [{"id": "claude-old", "capabilities": {"image_input": "yes"}}],
            "has_more": False,
            "last_id": "claude-old",
        },
    }

    async def handle(request: web.Request) -> web.Response:
        return web.json_response(pages[request.query.get("after_id", "")])

    return handle


def test_refresh_reads_every_page_of_the_messages_api(capsys: pytest.CaptureFixture[str]) -> None:
    with Loopback({"/v1/models": anthropic_pages()}) as server:
        anthropic_at(server.url)
        assert main(["models", "--refresh", "anthropic"]) == 0
    assert "2 models of anthropic cached" in capsys.readouterr().out
    queries = [query for _, query, _ in server.seen]
    assert queries == [{"limit": "1000"}, {"limit": "1000", "after_id": "claude-new"}]
    headers = server.seen[0][2]
    assert headers["x-api-key"] == "sk-ant-test" and headers["anthropic-version"] == "2023-06-01"
    harness = Harness(config="dsh.toml")
    harness.load()
    assert {"anthropic/claude-new", "anthropic/claude-old"} <= set(harness.llm.models())
    info = harness.llm.model_info("anthropic/claude-new")
    assert info == ModelInfo(1_000_000, 128_000, image_input=True, json_mode=False)
    assert harness.llm.model_info("anthropic/claude-old") == ModelInfo()
    assert harness.llm.model_info("anthropic/claude-unlisted") is None


def test_messages_api_refresh_failures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    routes = {
        "/v1/models": answer({"type": "error", "error": {"message": "overloaded"}}, 529),
        "/json/v1/models": answer(b"nope"),
    }
    with Loopback(routes) as server:
        anthropic_at(server.url)
        assert main(["models", "--refresh", "anthropic"]) == 1
        assert "overloaded" in capsys.readouterr().err
        anthropic_at(server.url + "/json")
        assert main(["models", "--refresh", "anthropic"]) == 1
        assert "Anthropic's answer is not JSON" in capsys.readouterr().err
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    anthropic_at(f"http://127.0.0.1:{closed}")
    assert main(["models", "--refresh", "anthropic"]) == 1
    assert "cannot reach Anthropic" in capsys.readouterr().err
    with silent_server() as url:
        configure(f'[llm_anthropic]\nanthropic_base_url = "{url}"\nidle_timeout_s = 2\n')
        assert main(["models", "--refresh", "anthropic"]) == 1
    assert "no answer from" in capsys.readouterr().err
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert main(["models", "--refresh", "anthropic"]) == 1
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


def test_a_page_without_models_or_cursor_is_the_last() -> None:
    assert page_of("A", {"data": [], "has_more": True, "last_id": "x"}) == ({}, None)
    assert page_of("A", {"data": [{"id": "m"}], "has_more": True}) == ({"m": ModelInfo()}, None)
    with pytest.raises(LlmError, match="not an object with a 'data' list"):
        page_of("A", {"data": None})


# -- The service and the cache ----------------------------------------------------------------


class Hosted:
    """A host's adapter under a prefix, deferred, that cannot list models."""

    @hookimpl
    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["host/*"], DeferredAdapter(lambda: ScriptedAdapter([])))


async def test_the_service_refuses_what_it_cannot_list() -> None:
    harness = Harness(plugins=[Hosted()], load_entrypoints=False)
    harness.load()
    with pytest.raises(LlmError, match="cannot list its provider's models"):
        await harness.llm.list_models("host")
    with pytest.raises(LlmError, match="cannot list") as again:  # built once, listed twice
        await harness.llm.list_models("host")
    assert again.value.failure.code == "INVALID_REQUEST"
    with pytest.raises(LlmError, match="no adapter serves provider 'nobody'; providers: host"):
        await harness.llm.list_models("nobody")
    bare = Harness(load_entrypoints=False)
    bare.load()
    with pytest.raises(LlmError, match="providers: none"):
        await bare.llm.list_models("nobody")


def test_refreshing_an_unknown_provider_and_an_unwritable_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "--refresh", "nobody"]) == 1
    assert "no adapter serves provider 'nobody'" in capsys.readouterr().err
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocked))
    with pytest.raises(UserConfigError, match="cannot write"):
        modelcache.write("openrouter", {})
    with Loopback({"/v1/models": answer({"data": []})}) as server:
        openrouter_at(server.url)
        assert main(["models", "--refresh", "openrouter"]) == 1
    assert "dsh models: cannot write" in capsys.readouterr().err


counts = st.none() | st.integers(1, 10**7)
flags = st.none() | st.booleans()
prices = st.none() | st.builds(
    Price,
    st.floats(0, 100),
    st.floats(0, 100),
    st.floats(0, 10),
    st.floats(0, 10),
)


@given(st.builds(ModelInfo, counts, counts, flags, flags, prices, flags, flags))
def test_a_cached_entry_reads_back_as_written(info: ModelInfo) -> None:
    assert modelcache.decode(json.loads(json.dumps(modelcache.encode(info)))) == info


def test_only_a_flat_price_is_cached() -> None:
    schedule = PriceSchedule(Price(2, 4), Price(1, 2), PeakHours(((0, 60),)))
    info = ModelInfo(context_window=5, pricing=schedule)
    assert modelcache.encode(info) == {"context_window": 5}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ([], "not a JSON object"),
        ({"context_window": 0}, "context_window is not a positive integer"),
        ({"max_output_tokens": "8K"}, "max_output_tokens is not a positive integer"),
        ({"tools": "yes"}, "tools is not true or false"),
        ({"price": 3}, "price is not a JSON object"),
        ({"price": {"input": "x", "output": 1}}, "price is not a table of dollars"),
        ({"price": {"input": 1}}, "price is not a table of dollars"),
    ],
)
def test_a_bad_entry_is_named(entry: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        modelcache.decode(entry)


def test_a_broken_or_unreadable_cache_is_ignored_with_a_warning() -> None:
    path = modelcache.cache_path("openrouter")
    path.parent.mkdir(parents=True)
    for text in ("{", '{"models": []}', '{"models": {"m": {"tools": 1}}}', "[]"):
        path.write_text(text)
        with structlog.testing.capture_logs() as logs:
            assert modelcache.read("openrouter") == {}
        assert logs[0]["event"] == "model cache ignored"
        assert logs[0]["fix"] == "run 'dsh models --refresh openrouter'"
    path.unlink()
    path.mkdir()  # a directory where the file should be
    with structlog.testing.capture_logs() as logs:
        assert modelcache.read("openrouter") == {}
    assert logs[0]["event"] == "model cache unreadable"


def test_without_a_provider_prefix_dsh_models_names_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "llm_anthropic,llm_providers")
    assert main(["models"]) == 0
    assert "any model under" not in capsys.readouterr().out
