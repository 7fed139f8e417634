"""A turn of a harness with every default plugin loaded, as ``dsh`` runs, imports only what it
uses: the modules of rare paths load when a run first takes them, and then work. Checked in a
fresh process, where ``sys.modules`` shows what was imported (the modules named here each cost
a start ~0.3-2 ms of CPU when imported for nothing)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: One turn of a scripted model, with every entry-point plugin loaded: ``argv[1]`` is the config
#: (JSON), ``argv[2]`` the script (the ``dsh.testing`` entries, as ``[name, *args]``), ``argv[3]``
#: the modules to look for, ``argv[4]`` what else to do (JSON): ``models`` the scripted model
#: is served as (the first is the agent's), ``options`` more ``AgentOptions``, ``prompt`` the
#: text of a prompt section to add, ``list`` to list the stored sessions and ``mcp`` to read the
#: MCP servers' status after the turn. Prints the modules imported when the turn ended or parked
#: (and those were done), what the agent's tools returned (a parked call allowed), its events,
#: the models the harness serves, the first request's system prompt, the stored sessions' count,
#: the MCP servers' states and the names ``dsh.values._events`` holds at the end.
TURN = """
import asyncio, json, sys
import dsh.testing
from dsh import AgentOptions, Harness

async def main():
    config, script, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    extra = json.loads(sys.argv[4])
    entries = [getattr(dsh.testing, name)(*args) for name, *args in script]
    models = extra.get("models", ["scripted"])
    async with Harness(config=config) as h:
        adapter = dsh.testing.ScriptedAdapter(entries)
        h.llm.register_adapter(models, adapter)
        if "prompt" in extra:
            from dsh import PromptSection

            h.system_prompt.section(PromptSection("extra", extra["prompt"]))
        options = AgentOptions(model=models[0], workspace=".", **extra.get("options", {}))
        agent = h.agent_loop.create("main", options)
        agent.send("go")
        await agent.wait_idle()
        stored = len(await h.sessions.stored()) if extra.get("list") else None
        mcp = [s.state for s in h.mcp.status()] if extra.get("mcp") else None
        imported = sorted(m for m in modules.split(",") if m in sys.modules)
        for parked in agent.pending_approvals():
            await agent.decide(parked.call_id, allow=True)
            await agent.wait_idle()
        results = [
            [block.text for block in event.data.content]
            for event in agent.session.events
            if event.type == "tool/result"
        ]
        report = {
            "imported": imported,
            "results": results,
            "models": sorted(h.llm.models()),
            "events": [event.type for event in agent.session.events],
            "system": adapter.requests[0].system,
            "stored": stored,
            "mcp": mcp,
            "event_names": sorted(vars(sys.modules["dsh.values._events"])),
        }
    print(json.dumps(report))

asyncio.run(main())
"""

#: What a turn of a fresh session that writes no file, names no provider, judges no command
#: line, parks no call, asks for no typed answer, adds no prompt section, reaches no budget,
#: falls back to no other model, lists no session and reads no MCP server's status leaves out;
#: nor does the SQLite store, off by default.
RARE = (
    "cattrs",
    "importlib.metadata",
    "dsh.llm._section",
    "dsh.loop._output_spec",
    "dsh.loop._recovery",
    "dsh.session._rewind",
    "dsh.values._approval",
    "dsh_plugins.budgets._family",
    "dsh_plugins.fallback._switch",
    "dsh_plugins.llm_providers.profiles",
    "dsh_plugins.mcp.status",
    "dsh_plugins.permissions.commands",
    "dsh_plugins.persistence_jsonl.listing",
    "dsh_plugins.persistence_sqlite.leases",
    "dsh_plugins.tools_fs.files",
    "dsh_plugins.tools_shell.process",
)


#: A turn, then the session resumed by another harness and a second turn: prints whether the
#: recovery module was imported before the resume and after it, and the turns' answers.
RESUME = """
import asyncio, json, sys
import dsh.testing
from dsh import AgentOptions, Harness

async def main():
    adapter = dsh.testing.ScriptedAdapter(
        [dsh.testing.text_response("one"), dsh.testing.text_response("two")]
    )
    options = AgentOptions(model="scripted")
    async with Harness() as h:
        h.llm.register_adapter(["scripted"], adapter)
        agent = h.agent_loop.create("main", options)
        agent.send("go")
        await agent.wait_idle()
        session_id = agent.session.id
    before = "dsh.loop._recovery" in sys.modules
    async with Harness() as h:
        h.llm.register_adapter(["scripted"], adapter)
        agent = await h.agent_loop.resume(session_id, options)
        agent.send("again")
        await agent.wait_idle()
        answers = [
            block.text
            for event in agent.session.events
            if event.type == "assistant/message"
            for block in event.data.content
        ]
    after = "dsh.loop._recovery" in sys.modules
    print(json.dumps({"before": before, "after": after, "answers": answers}))

asyncio.run(main())
"""


def child_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a child process: this tree, every plugin, no user configuration."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_DATA_HOME": str(tmp_path / "data")}
    env.pop("DSH_DISABLE_PLUGINS", None)
    env.pop("DSH_CONFIG", None)
    env.pop("DSH_DEBUG", None)  # its tool results read back through cattrs: not how dsh runs
    return env


def run(tmp_path: Path, code: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def turn(
    tmp_path: Path,
    config: dict[str, Any],
    script: list[list[Any]],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    arguments = (json.dumps(config), json.dumps(script), ",".join(RARE), json.dumps(extra or {}))
    return run(tmp_path, TURN, *arguments)


def test_a_plain_turn_imports_no_rare_path(tmp_path: Path) -> None:
    report = turn(tmp_path, {}, [["text_response", "hello"]])
    assert report["imported"] == []


def test_a_resume_loads_the_recovery_and_continues_the_session(tmp_path: Path) -> None:
    report = run(tmp_path, RESUME)
    assert (report["before"], report["after"]) == (False, True)
    assert report["answers"] == ["one", "two"]


def test_a_file_tool_that_changes_a_file_loads_the_checkpoints_and_records(
    tmp_path: Path,
) -> None:
    script: list[list[Any]] = [
        ["tool_call_response", "c1", "write_file", {"path": "a.txt", "content": "one"}],
        ["text_response", "written"],
    ]
    config = {"permissions": {"mode": "workspace-write"}}
    report = turn(tmp_path, config, script)
    assert report["imported"] == ["dsh.session._rewind", "dsh_plugins.tools_fs.files"]
    assert report["results"] == [["created a.txt (3 bytes, 1 lines)"]]
    assert "file/changed" in report["events"]
    assert (tmp_path / "a.txt").read_text() == "one"


def test_a_configured_provider_loads_the_profiles_and_is_served(tmp_path: Path) -> None:
    config: dict[str, Any] = {"llm_providers": {"ollama": {"models": {"llama3": {}}}}}
    report = turn(tmp_path, config, [["text_response", "hello"]])
    assert report["imported"] == ["dsh_plugins.llm_providers.profiles"]
    assert "ollama/llama3" in report["models"]


@pytest.mark.parametrize(
    ("command", "result", "ran"),
    [
        ("echo hi", "hi", ["dsh_plugins.tools_shell.process"]),
        ("ls", "Error: permission denied", []),
    ],
)
def test_a_rule_judging_a_command_loads_the_command_parser_and_applies(
    tmp_path: Path, command: str, result: str, ran: list[str]
) -> None:
    rules = [{"tool": "shell", "match": "echo *", "action": "allow"}]
    config = {"permissions": {"mode": "read-only", "rules": rules}}
    script: list[list[Any]] = [
        ["tool_call_response", "c1", "shell", {"command": command}],
        ["text_response", "ran"],
    ]
    report = turn(tmp_path, config, script)
    # The shell tool's process runner loads with the first command it runs.
    assert report["imported"] == ["dsh_plugins.permissions.commands", *ran]
    assert report["results"][0][0].startswith(result)


def test_a_call_parked_for_approval_loads_the_approvals_and_runs_once_allowed(
    tmp_path: Path,
) -> None:
    # A command asks; with nobody to answer, "defer" parks the turn until a decision.
    config = {"permissions": {"mode": "workspace-write", "approval": "defer"}}
    script: list[list[Any]] = [
        ["tool_call_response", "c1", "shell", {"command": "echo hi"}],
        ["text_response", "ran"],
    ]
    report = turn(tmp_path, config, script)
    assert report["imported"] == ["dsh.values._approval"]  # while parked: no command ran yet
    assert report["results"] == [["hi\n[exit code 0]"]]
    assert "approval/decided" in report["events"]


def test_a_typed_answer_loads_the_output_specs_and_is_accepted(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    script: list[list[Any]] = [["tool_call_response", "c1", "final_result", {"n": 3}]]
    report = turn(tmp_path, {}, script, {"options": {"output_type": schema}})
    # Checking the answer reads a validator's refusal as cattrs reports it.
    assert report["imported"] == ["cattrs", "dsh.loop._output_spec"]
    assert report["results"] == [["Result accepted."]]
    assert "output/result" in report["events"]


def test_a_prompt_section_loads_its_class_and_reaches_the_model(tmp_path: Path) -> None:
    report = turn(tmp_path, {}, [["text_response", "hi"]], {"prompt": "Be brief."})
    assert report["imported"] == ["dsh.llm._section"]
    assert "Be brief." in report["system"]


def test_a_reached_budget_loads_the_limits_and_stops_the_turn(tmp_path: Path) -> None:
    config = {"budgets": {"max_steps_per_turn": 1}}
    script: list[list[Any]] = [
        ["tool_call_response", "c1", "list_dir", {"path": "."}],
        ["text_response", "never asked"],
    ]
    report = turn(tmp_path, config, script)
    assert "dsh_plugins.budgets._family" in report["imported"]
    assert report["events"][-2:] == ["budget/exceeded", "turn/end"]


def test_a_failing_model_loads_the_switch_and_falls_back(tmp_path: Path) -> None:
    config = {"fallback": {"chains": {"scripted": ["backup"]}}}
    script: list[list[Any]] = [["error_response", "AUTH", "bad key"], ["text_response", "hi"]]
    report = turn(tmp_path, config, script, {"models": ["scripted", "backup"]})
    assert report["imported"] == ["dsh_plugins.fallback._switch"]
    assert "llm/fallback" in report["events"]
    assert "assistant/message" in report["events"]


def test_a_listing_loads_the_session_listing_and_finds_the_session(tmp_path: Path) -> None:
    report = turn(tmp_path, {}, [["text_response", "hi"]], {"list": True})
    assert report["imported"] == ["dsh_plugins.persistence_jsonl.listing"]
    assert report["stored"] == 1


def test_an_enabled_sqlite_store_loads_the_leases_and_keeps_the_session(tmp_path: Path) -> None:
    config = {"persistence_sqlite": {"enabled": True}, "persistence_jsonl": {"enabled": False}}
    report = turn(tmp_path, config, [["text_response", "hi"]], {"list": True})
    assert report["imported"] == ["dsh_plugins.persistence_sqlite.leases"]
    assert report["stored"] == 1


def test_an_mcp_status_loads_its_class_and_tells_the_state(tmp_path: Path) -> None:
    config = {"mcp": {"servers": {"off": {"command": "true", "enabled": False}}}}
    report = turn(tmp_path, config, [["text_response", "hi"]], {"mcp": True})
    assert report["imported"] == ["dsh_plugins.mcp.status"]
    assert report["mcp"] == ["disabled"]


#: A harness started and closed: prints whether the metadata parser (``email.parser``) was
#: imported, then a plugin's distribution and version, read on demand, and whether it then was.
PLUGIN_INFO = """
import asyncio, json, sys
from dsh import Harness

async def main():
    async with Harness() as h:
        pass
    started = "email.parser" in sys.modules
    info = h.plugins.info["tools_fs"]
    print(json.dumps({
        "started": started,
        "distribution": [info.distribution, info.version],
        "asked": "email.parser" in sys.modules,
    }))

asyncio.run(main())
"""


def test_a_start_reads_no_distribution_metadata_until_it_is_asked_for(tmp_path: Path) -> None:
    expected = ["dsh-harness", importlib.metadata.version("dsh-harness")]
    report = run(tmp_path, PLUGIN_INFO)
    assert report == {"started": False, "distribution": expected, "asked": True}
    listed = subprocess.run(
        [sys.executable, "-m", "dsh", "plugins"],
        cwd=tmp_path,
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"tools_fs                 {' '.join(expected)}" in listed.stdout.splitlines()


#: A harness started with the config ``argv[1]`` (JSON) and closed: prints whether cattrs was
#: imported, and the config's errors if it has any.
CONFIGURED = """
import asyncio, json, sys
from dsh import ConfigError, Harness

async def main():
    try:
        async with Harness(config=json.loads(sys.argv[1])):
            pass
    except ConfigError as exc:
        return exc.errors
    return None

errors = asyncio.run(main())
print(json.dumps({"cattrs": "cattrs" in sys.modules, "errors": errors}))
"""


def test_a_start_with_a_right_config_imports_no_cattrs(tmp_path: Path) -> None:
    config = {"llm_deepseek": {"base_url": "http://127.0.0.1:9", "api_key": "x"}}
    report = run(tmp_path, CONFIGURED, json.dumps(config))
    assert report == {"cattrs": False, "errors": None}


def test_a_wrong_config_reads_as_cattrs_reports_it(tmp_path: Path) -> None:
    config = {"llm_deepseek": {"base_url": "http://127.0.0.1:9", "idle_timeout_s": 0}}
    report = run(tmp_path, CONFIGURED, json.dumps(config))
    assert report == {
        "cattrs": True,
        "errors": ["[llm_deepseek] idle_timeout_s must be greater than 0, got 0.0"],
    }


#: ``argv[1]`` ``write``: a turn after context was injected (a ``context/message``, whose class
#: is defined when first needed), printing the session's id; ``resume`` (``argv[2]``, the id):
#: the session resumed and a second turn, printing whether that class's module was imported
#: before the resume and after, what the model was sent and the second answer.
RARE_RESUME = """
import asyncio, json, sys
import dsh.testing
from dsh import AgentOptions, Harness

async def main():
    adapter = dsh.testing.ScriptedAdapter([dsh.testing.text_response("one")])
    options = AgentOptions(model="scripted")
    async with Harness() as h:
        h.llm.register_adapter(["scripted"], adapter)
        if sys.argv[1] == "write":
            agent = h.agent_loop.create("main", options)
            agent.inject("the context")
            agent.send("go")
            await agent.wait_idle()
            print(json.dumps({"session": agent.session.id}))
            return
        before = "dsh.values._rare_events" in sys.modules
        agent = await h.agent_loop.resume(sys.argv[2], options)
        after = "dsh.values._rare_events" in sys.modules
        agent.send("again")
        await agent.wait_idle()
        sent = [block.text for m in adapter.requests[-1].messages for block in m.content]
        print(json.dumps({"before": before, "after": after, "sent": sent}))

asyncio.run(main())
"""


def test_a_plain_turn_defines_none_of_the_rare_event_types(tmp_path: Path) -> None:
    from dsh.values._events import LATER

    modules = ",".join([*RARE, "dsh.values._rare_events"])
    report = run(tmp_path, TURN, "{}", json.dumps([["text_response", "hello"]]), modules, "{}")
    assert report["imported"] == []
    assert report["events"][-1] == "turn/end"
    rare = {*LATER.values(), "ElidedResult"}
    assert "HistoryPrune" in rare
    assert rare.isdisjoint(report["event_names"])


def test_a_session_with_a_rare_event_type_resumes_defining_it_then(tmp_path: Path) -> None:
    session = run(tmp_path, RARE_RESUME, "write")["session"]
    report = run(tmp_path, RARE_RESUME, "resume", session)
    assert (report["before"], report["after"]) == (False, True)
    assert any("the context" in text for text in report["sent"])  # the context, read back
    assert report["sent"][-1] == "again"
