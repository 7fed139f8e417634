"""Before the first prompt: options, early failures with a clear message, the agent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from dsh import AgentOptions, DshError, Harness
from dsh.testing import MemoryStore, text_response
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.terminal_ui import startup
from tests.plugins.terminal_ui.conftest import Kit, make_harness, run_args


def deepseek_harness(**section: str) -> Harness:
    config = {"llm_deepseek": section} if section else None
    harness = Harness(load_entrypoints=False, plugins=[DeepSeekPlugin()], config=config)
    harness.load()
    return harness


def test_the_real_api_without_a_key_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = deepseek_harness()
    for model in ("deepseek-flash", "deepseek-v4-flash", "deepseek/deepseek-v4-pro"):
        problem = startup.model_problem(harness, model)
        assert problem == startup.NO_KEY
    assert "\n" not in startup.NO_KEY
    assert "DEEPSEEK_API_KEY" in startup.NO_KEY and "dsh demo" in startup.NO_KEY
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")
    assert startup.model_problem(harness, "deepseek-v4-flash") is None


def test_a_configured_key_or_another_server_works_offline() -> None:
    assert startup.model_problem(deepseek_harness(api_key="sk-x"), "deepseek-v4-flash") is None
    local = deepseek_harness(base_url="http://127.0.0.1:9")
    assert startup.model_problem(local, "deepseek-v4-flash") is None


def test_models_other_adapters_serve_need_no_deepseek_key() -> None:
    harness = Harness(load_entrypoints=False, plugins=[DeepSeekPlugin(), Kit()])
    harness.load()
    assert startup.model_problem(harness, "scripted") is None
    assert startup.model_problem(make_harness(Kit()), "scripted") is None  # no llm_deepseek
    config: dict[str, dict[str, list[str]]] = {"llm_deepseek": {"models": []}}
    serves_none = Harness(load_entrypoints=False, plugins=[DeepSeekPlugin(), Kit()], config=config)
    serves_none.load()
    assert startup.model_problem(serves_none, "scripted") is None


def test_an_unknown_model_lists_the_known_ones() -> None:
    problem = startup.model_problem(make_harness(Kit()), "gpt-9")
    assert problem == "no adapter serves model 'gpt-9'; known models: other, scripted"
    empty = Harness(load_entrypoints=False)
    empty.load()
    assert startup.model_problem(empty, "x") == "no adapter serves model 'x'; known models: none"


def test_options_fall_back_on_the_config(tmp_path: Path) -> None:
    harness = make_harness(Kit())
    assert startup.agent_options(harness, run_args("hi")) == AgentOptions(model="scripted")
    args = run_args("hi", "--model", "other", "--system", "be brief", "--workspace", str(tmp_path))
    assert startup.agent_options(harness, args) == AgentOptions(
        model="other", system_prompt="be brief", workspace=str(tmp_path)
    )
    assert startup.options_problem(harness, args) is None
    missing = run_args("hi", "--workspace", str(tmp_path / "nope"))
    assert startup.options_problem(harness, missing) == (
        f"workspace {str(tmp_path / 'nope')!r} is not a directory"
    )


def test_config_is_accepted_after_the_command_too() -> None:
    args = run_args("--config", "x.toml", "hi")
    assert args.prompt == "hi" and "config" not in vars(run_args("hi"))
    with pytest.raises(SystemExit):
        run_args("--resume", "a", "--continue")


async def test_a_new_agent_gets_a_fresh_session() -> None:
    async with make_harness(Kit()) as harness:
        agent = await startup.open_agent(harness, "run", run_args("hi"), AgentOptions("scripted"))
        assert agent.id == "run" and re.fullmatch(r"run-\d{8}-\d{6}-[0-9a-f]{4}", agent.session.id)


async def test_resume_and_continue_find_stored_sessions() -> None:
    store = MemoryStore()
    async with make_harness(Kit([text_response("one")]), store=store) as harness:
        first = await startup.open_agent(harness, "a", run_args("x"), AgentOptions("scripted"))
        first.send("hi")
        await first.wait_idle()
    async with make_harness(Kit(), store=store) as harness:
        options = AgentOptions("scripted")
        resumed = await startup.open_agent(harness, "b", run_args("-r", first.session.id), options)
        assert resumed.session.id == first.session.id and resumed.id == "b"
        await resumed.dispose()
        latest = await startup.open_agent(harness, "c", run_args("x", "--continue"), options)
        assert latest.session.id == first.session.id
        with pytest.raises(DshError, match="no stored session 'nope'"):
            await startup.open_agent(harness, "d", run_args("x", "-r", "nope"), options)


async def test_continue_without_stored_sessions_says_so() -> None:
    async with make_harness(Kit()) as harness:
        with pytest.raises(DshError, match="no stored session to continue"):
            await startup.open_agent(harness, "a", run_args("-c"), AgentOptions("scripted"))


def test_failed_turns_are_not_logged_twice() -> None:
    structlog.reset_defaults()
    args = run_args("hi")
    startup.quiet_logs(args)  # not from the dsh command line: logging is left alone
    assert not structlog.is_configured()
    args.log_format, args.log_level = "console", "warning"
    startup.quiet_logs(args)
    with capture_logs() as logs:  # the level filter stays in place; only processors change
        structlog.get_logger("t").warning("filtered out")
        structlog.get_logger("t").error("kept")
    assert [log["event"] for log in logs] == ["kept"]
    structlog.reset_defaults()
    args.log_level = "info"
    startup.quiet_logs(args)
    assert not structlog.is_configured()
