"""``dsh run --schema``: the validated JSON on stdout; the exit code says how it ended."""

from __future__ import annotations

import io
import json
from pathlib import Path

import attrs

from dsh.loop._output import FINAL_RESULT
from dsh.testing import error_response, text_response, tool_call_response
from dsh_plugins.terminal_ui import headless
from tests.plugins.terminal_ui.conftest import Kit, make_harness, run_args

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["city", "people"],
}


async def run(kit: Kit, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await headless.run(make_harness(kit), run_args(*argv), io.StringIO(), out, err)
    return code, out.getvalue(), err.getvalue()


async def test_the_validated_json_alone_goes_to_stdout() -> None:
    answer = {"city": "Oslo", "people": 700000}
    kit = Kit([tool_call_response("c1", FINAL_RESULT, answer, text="Let me answer.")], ask=False)
    code, out, err = await run(kit, "capital of Norway?", "--schema", json.dumps(SCHEMA))
    assert code == 0 and json.loads(out) == answer
    assert "Let me answer." in err
    offered = [t.name for t in kit.adapter.requests[0].tools]
    assert FINAL_RESULT in offered


async def test_a_schema_file_and_an_answer_that_never_matches(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    kit = Kit([text_response("Oslo") for _ in range(3)], ask=False)
    code, out, err = await run(kit, "capital?", "--schema", str(path))
    assert (code, out) == (1, "")
    assert "gave no valid result after 3 attempts" in err


async def test_a_failed_turn_keeps_its_exit_code() -> None:
    kit = Kit([error_response("BOOM", "down")], ask=False)
    code, out, _ = await run(kit, "capital?", "--schema", json.dumps(SCHEMA))
    assert (code, out) == (1, "")


async def test_bad_schemas_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text("[1]")
    cases = {
        "{nope": "the schema in --schema is not valid JSON",
        str(tmp_path / "missing.json"): "cannot read the schema file",
        str(tmp_path / "list.json"): "must be a JSON object, got list",
    }
    for schema, message in cases.items():
        code, out, err = await run(Kit([]), "capital?", "--schema", schema)
        assert code == headless.USAGE_ERROR and out == "" and message in err


@attrs.frozen
class Review:
    verdict: str
    score: int


PROFILE = {"agent_loop": {"agents": [{"id": "review", "output_type": f"{__name__}:Review"}]}}


async def run_review(kit: Kit) -> tuple[int, str, str]:
    """``dsh run --agent review "review it"``."""
    out, err = io.StringIO(), io.StringIO()
    argv = run_args("--agent", "review", "review it")
    code = await headless.run(make_harness(kit, PROFILE), argv, io.StringIO(), out, err)
    return code, out.getvalue(), err.getvalue()


async def test_an_agent_with_an_output_type_keeps_the_schema_contract() -> None:
    """``--agent review`` whose profile names an output type: JSON alone on stdout (before,
    the answer came as text, exit 0, as if untyped)."""
    answer = {"verdict": "fine", "score": 9}
    kit = Kit([tool_call_response("c1", FINAL_RESULT, answer, text="Reviewing.")], ask=False)
    code, out, err = await run_review(kit)
    assert (code, json.loads(out)) == (0, answer)
    assert "Reviewing." in err


async def test_an_agent_whose_answer_never_validates_exits_1() -> None:
    code, out, err = await run_review(
        Kit([text_response("looks fine") for _ in range(3)], ask=False)
    )
    assert (code, out) == (1, "")
    assert "gave no valid Review after 3 attempts" in err
