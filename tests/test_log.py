"""dsh's loggers import structlog at the first line they log that can be shown, carry what the
loop binds, and leave a host's configuration alone (``dsh/_log.py``)."""

from __future__ import annotations

import contextvars
import io
import subprocess
import sys
import textwrap
from collections.abc import MutableMapping
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from dsh import _log
from dsh.plugin import get_logger

#: A fresh process: a harness starts, an agent runs a turn, a debug line is logged; structlog is
#: still not imported. Then a warning: structlog is imported, configured as dsh configures it
#: (warnings and up, plain lines on stderr), and the line carries what the loop bound.
FRESH = textwrap.dedent(
    """
    import asyncio, sys
    from dsh import AgentOptions, Harness, hookimpl
    from dsh.plugin import get_logger
    from dsh.testing import ScriptedAdapter, text_response
    from dsh._log import bind_context

    class Model:
        @hookimpl
        def dsh_register_llm_adapters(self, register):
            register(["scripted"], ScriptedAdapter([text_response("hello")]))

    async def main():
        async with Harness(plugins=[Model()]) as harness:  # every installed plugin too
            agent = harness.agent_loop.create("a", AgentOptions("scripted"))
            agent.send("hi")
            await agent.wait_idle()
        log = get_logger("dsh.test")
        log.debug("not shown", n=1)
        log.info("not shown either")
        print("loaded" if "structlog" in sys.modules else "not loaded", flush=True)
        bind_context(agent="a1", turn=3)
        log.warning("shown", n=2)
        print("loaded" if "structlog" in sys.modules else "not loaded", flush=True)

    asyncio.run(main())
    """
)


@pytest.mark.usefixtures("cli_workdir")  # its own directory; every plugin enabled
def test_a_run_that_logs_nothing_shown_never_imports_structlog() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["not", "loaded", "loaded"]
    (line,) = done.stderr.splitlines()
    assert "shown" in line and "[warning  ]" in line
    assert "agent=a1" in line and "turn=3" in line and "n=2" in line
    assert "not shown" not in done.stderr


def test_each_level_goes_to_structlog_with_the_bound_context() -> None:
    log = get_logger("dsh.test")

    def logged() -> list[MutableMapping[str, Any]]:
        _log.bind_context(agent="a", session="s")
        _log.bind_context(turn=2)
        with capture_logs() as logs:
            log.debug("d", k=1)
            log.info("i")
            log.warning("w")
            log.error("e")
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("x")
            structlog.get_logger("host").info("the host's own line")
        return logs

    logs = contextvars.copy_context().run(logged)
    assert [(entry["event"], entry["log_level"]) for entry in logs] == [
        ("d", "debug"),
        ("i", "info"),
        ("w", "warning"),
        ("e", "error"),
        ("x", "error"),
        ("the host's own line", "info"),
    ]
    # dsh's lines carry the context; so does the host's, structlog being imported at bind time
    for entry in logs[:5]:
        assert (entry["agent"], entry["session"], entry["turn"]) == ("a", "s", 2)
    assert logs[0]["k"] == 1 and logs[4]["exc_info"] is True
    assert structlog.contextvars.get_contextvars() == {}  # bound in the copy only


def test_without_structlog_quiet_lines_are_dropped_and_context_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_log, "structlog_loaded", lambda: False)

    def run() -> tuple[list[MutableMapping[str, Any]], dict[str, Any]]:
        _log.bind_context(agent="b")
        with capture_logs() as logs:
            get_logger("dsh.test").debug("dropped")
            get_logger("dsh.test").info("dropped too")
        return logs, structlog.contextvars.get_contextvars()

    logs, bound = contextvars.copy_context().run(run)
    assert logs == []
    assert bound == {}  # not bound in structlog: it was taken as not imported


def test_a_host_configuration_is_kept() -> None:
    out = io.StringIO()
    structlog.configure(
        processors=[lambda _, __, event: {**event, "host": True}, lambda *a: str(a[2])],
        logger_factory=structlog.PrintLoggerFactory(out),
    )
    get_logger("dsh.test").warning("kept", n=1)
    (line,) = out.getvalue().splitlines()
    assert "'host': True" in line and "'n': 1" in line


@pytest.mark.usefixtures("cli_workdir")
def test_a_command_that_logs_nothing_never_imports_structlog() -> None:
    script = (
        "import sys\nfrom dsh.cli import main\nmain(['plugins'])\nprint('structlog' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines()[-1] == "False"


def test_a_bad_log_level_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    from dsh.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--log-level", "loud", "plugins"])
    assert stopped.value.code == 2
    assert "invalid choice: 'loud'" in capsys.readouterr().err
    with pytest.raises(KeyError):
        _log.configure_logging(level="loud")


def test_a_deferred_configuration_applies_at_the_first_line_it_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = [False]
    monkeypatch.setattr(_log, "structlog_loaded", lambda: loaded[0])
    out = io.StringIO()
    _log.configure_logging("json", "info", out, deferred=True)
    assert not structlog.is_configured()  # nothing done yet
    log = get_logger("dsh.test")
    log.debug("below the level asked for")
    assert not structlog.is_configured()
    log.info("shown", n=1)
    assert structlog.is_configured()
    (line,) = out.getvalue().splitlines()
    assert '"event": "shown"' in line and '"level": "info"' in line and '"n": 1' in line
    # with structlog imported, a deferred configuration is applied at once
    loaded[0] = True
    _log.configure_logging("json", "error", out, deferred=True)
    log.warning("filtered out now")
    assert len(out.getvalue().splitlines()) == 1


def test_a_configuration_made_after_a_deferred_one_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_log, "structlog_loaded", lambda: False)
    deferred, host = io.StringIO(), io.StringIO()
    _log.configure_logging("json", "debug", deferred, deferred=True)
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(host))  # the host's, later
    get_logger("dsh.test").warning("to the host's")
    assert deferred.getvalue() == "" and "to the host's" in host.getvalue()
    get_logger("dsh.test").warning("again")  # the deferred one is gone, not applied later
    assert deferred.getvalue() == ""
