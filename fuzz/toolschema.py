"""Fuzz tool schemas: the check made when a tool is registered either refuses a schema (with
a JSON pointer and a reason) or accepts it, and validating any value against an accepted
schema returns messages and never raises (arguments come from a model, schemas from MCP
servers dsh did not write)."""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from dsh.tools._schema import schema_problem, validate

from _support import json_value


def one_input(raw: bytes) -> None:
    data = atheris.FuzzedDataProvider(raw)
    schema = json_value(data)
    value = json_value(data)
    problem = schema_problem(schema)
    if problem is not None:
        pointer, reason = problem
        assert pointer == "" or pointer.startswith("/"), f"not a JSON pointer: {pointer!r}"
        assert reason, "a refusal without a reason"
        return
    assert isinstance(schema, dict)
    problems = validate(value, schema)
    assert isinstance(problems, list)
    assert all(isinstance(problem, str) for problem in problems)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
