"""The gateway under test: dsh's mock server (in a thread of this process, on its own event
loop) behind a real LiteLLM proxy (a subprocess from its own environment), both on 127.0.0.1.

The ``gateway`` tox env installs ``litellm[proxy]`` into a virtual environment of its own
(LiteLLM's pins conflict with dsh's) and names its ``litellm`` executable in
:data:`LITELLM_ENV`; without it the gateway tests skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dsh.testing.mockserver import MockServer, RecordedRequest, ScenarioSpec

__all__ = [
    "LITELLM_ENV",
    "UPSTREAMS",
    "Gateway",
    "LiteLlmProxy",
    "MockThread",
    "litellm_executable",
    "proxy_config",
]

#: The environment variable naming the ``litellm`` executable (set by the ``gateway`` tox env).
LITELLM_ENV = "DSH_TEST_LITELLM"

#: The upstream formats LiteLLM translates, by the model name dsh asks the proxy for: the mock
#: as an OpenAI-compatible server (``openai/``), as DeepSeek (``deepseek/``), and its Messages
#: endpoint as Anthropic (``anthropic/``).
UPSTREAMS = ("oai-up", "ds-up", "ant-up")

#: How long LiteLLM waits for the upstream (its own timeout; dsh's idle timeouts are shorter
#: in the stall cases, so dsh's fires first).
LITELLM_REQUEST_TIMEOUT_S = 30
#: How long the proxy may take to start (imports, config, the ASGI server) on a busy machine.
STARTUP_TIMEOUT_S = 90.0


def litellm_executable() -> str | None:
    """The ``litellm`` executable the environment names, if any."""
    return os.environ.get(LITELLM_ENV) or None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class MockThread:
    """A :class:`MockServer` serving from a thread with its own event loop, so that it outlives
    each test's event loop and answers the proxy while a test waits."""

    def __init__(self) -> None:
        self.server = MockServer()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mock", daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    @property
    def url(self) -> str:
        return self.server.url

    def queue(self, *specs: ScenarioSpec) -> None:
        self._call(lambda: self.server.queue(*specs))

    def queued(self) -> int:
        count: int = self._call(lambda: self.server.queued)
        return count

    def drain(self) -> None:
        """Forget what a failed case left queued, so that it does not answer the next case
        (the mock has no control endpoint for this)."""
        self._call(self.server._queue.clear)

    def requests(self) -> list[RecordedRequest]:
        """The requests the mock received (those the proxy sent upstream), in order."""
        found: list[RecordedRequest] = self._call(lambda: list(self.server.requests))
        return found

    def _call(self, call: Any) -> Any:
        async def run() -> Any:
            return call()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)


#: What LiteLLM is told about a deployment. On the Messages route, a request with thinking on
#: for an ``openai/`` model that may reason (one missing from the cost map may) is sent
#: upstream to ``/v1/responses`` — whatever
#: ``LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES`` says — which DeepSeek-compatible
#: servers do not serve; declaring that it does not reason keeps it on chat completions.
MODEL_INFO: dict[str, dict[str, Any]] = {"oai-up": {"supports_reasoning": False}}


def proxy_config(mock_url: str, master_key: str) -> dict[str, Any]:
    """LiteLLM's config (JSON is YAML): the three upstreams, all the mock; no retries, no
    cooldowns (a 429 case must not take a model out of the next case), no telemetry."""
    key = "mock-upstream-key"
    params = {
        "oai-up": {"model": "openai/deepseek-flash", "api_base": f"{mock_url}/v1"},
        "ds-up": {"model": "deepseek/deepseek-flash", "api_base": mock_url},
        "ant-up": {"model": "anthropic/deepseek-flash", "api_base": f"{mock_url}/anthropic"},
    }
    return {
        "model_list": [
            {
                "model_name": name,
                "litellm_params": {**params[name], "api_key": key},
                "model_info": MODEL_INFO.get(name, {}),
            }
            for name in UPSTREAMS
        ],
        "litellm_settings": {
            "drop_params": True,
            "num_retries": 0,
            "request_timeout": LITELLM_REQUEST_TIMEOUT_S,
            "telemetry": False,
        },
        "router_settings": {"num_retries": 0, "disable_cooldowns": True},
        "general_settings": {"master_key": master_key},
    }


def proxy_environment(master_key: str) -> dict[str, str]:
    """The proxy's environment: offline (the cost map bundled with LiteLLM, no telemetry),
    loopback only, and the Messages route for an ``openai/`` model sent upstream as chat
    completions (by default LiteLLM sends it to ``/v1/responses``, which DeepSeek and the mock
    do not serve)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_TELEMETRY="False",
        LITELLM_MASTER_KEY=master_key,
        LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES="true",
        NO_PROXY="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
    )
    return env


class LiteLlmProxy:
    """``litellm --config ...`` on a free loopback port; :meth:`start` returns once its
    readiness endpoint answers."""

    def __init__(self, executable: str, mock_url: str, workdir: Path) -> None:
        self.executable = executable
        self.master_key = "sk-" + secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "litellm.log"
        self.config_path = workdir / "litellm.yaml"
        self.config_path.write_text(json.dumps(proxy_config(mock_url, self.master_key), indent=1))
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def command(self) -> Sequence[str]:
        return (
            self.executable,
            "--config",
            str(self.config_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--num_workers",
            "1",
        )

    def start(self) -> None:
        self._log = self.log_path.open("wb")
        self._process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=proxy_environment(self.master_key),
            cwd=self.config_path.parent,
            start_new_session=True,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._ready():
            if self._process.poll() is not None:
                raise RuntimeError(f"LiteLLM exited with {self._process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"LiteLLM not ready after {STARTUP_TIMEOUT_S} s:\n{self.log()}")
            time.sleep(0.25)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health/readiness", timeout=5) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def log(self, tail: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)
        if self._log is not None:
            self._log.close()
            self._log = None


class Gateway:
    """The mock behind the proxy, as the tests use them."""

    def __init__(self, mock: MockThread, proxy: LiteLlmProxy) -> None:
        self.mock = mock
        self.proxy = proxy

    def config(self, idle_timeout_s: float, provider: Mapping[str, Any]) -> dict[str, Any]:
        """Harness config: ``llm_providers`` (a custom provider on the proxy's ``/v1``, as
        ``lite/<upstream>``) and ``llm_anthropic`` (the proxy as Anthropic's base URL, as
        ``anthropic/<upstream>``); ``provider``: more settings of the custom provider."""
        models = {name: {"reasoning": True, "price": PRICE} for name in UPSTREAMS}
        lite = {
            "base_url": f"{self.proxy.url}/v1",
            "api_key_env": KEY_ENV,
            "reasoning_field": "auto",
            "send_reasoning": True,
            "idle_timeout_s": idle_timeout_s,
            "models": models,
            **provider,
        }
        return {
            "llm_providers": {"custom": {"lite": lite}},
            "llm_anthropic": {
                "anthropic_base_url": self.proxy.url,
                "anthropic_api_key": self.proxy.master_key,
                "anthropic_models": list(UPSTREAMS),
                "deepseek_models": [],
                "idle_timeout_s": idle_timeout_s,
            },
        }


#: The environment variable ``llm_providers`` reads the proxy's key from.
KEY_ENV = "DSH_TEST_LITELLM_KEY"
#: Dollars per million tokens, for the usage-and-cost case.
PRICE = {"input": 1.0, "output": 2.0, "cache_read": 0.5}
