"""Every docs page reads as plain Markdown (on a code host, not only through Sphinx): no
``{literalinclude}``; code shown from the examples is inlined, and this checks that each inlined
block still equals the part of the example file it names, so the two cannot drift.

An inlined block is announced by a comment naming its source and how to cut it, as
``literalinclude`` would: ``<!-- inlined from PATH {"pyobject": NAME, "start-at": TEXT,
"end-before": TEXT} -->``. Regenerate after changing an example with
``python -m tests.test_docs_plain``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

DOCS = Path(__file__).parent.parent / "docs"
_INLINED = re.compile(
    r"<!-- inlined from (?P<path>\S+) (?P<options>\{.*?\}) -->\n"
    r"```(?P<language>\w+)\n(?P<code>.*?)```\n",
    re.DOTALL,
)


def excerpt(path: Path, options: dict[str, str]) -> str:
    """The part of ``path`` that ``options`` names (as ``literalinclude`` cuts it)."""
    lines = path.read_text().splitlines(keepends=True)
    if "pyobject" in options:
        lines = _pyobject(lines, options["pyobject"])
    if "start-at" in options:
        lines = lines[next(i for i, line in enumerate(lines) if options["start-at"] in line) :]
    if "end-before" in options:
        lines = lines[: next(i for i, line in enumerate(lines) if options["end-before"] in line)]
    return "".join(lines).rstrip("\n") + "\n"


def _pyobject(lines: list[str], name: str) -> list[str]:
    tree = ast.parse("".join(lines))
    node = next(
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name == name
    )
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return lines[first - 1 : node.end_lineno]


def blocks(page: Path) -> list[re.Match[str]]:
    return list(_INLINED.finditer(page.read_text()))


def test_no_page_needs_sphinx_to_show_its_code() -> None:
    for page in DOCS.rglob("*.md"):
        assert "{literalinclude}" not in page.read_text(), page.name


def test_inlined_code_equals_the_examples() -> None:
    found = 0
    for page in DOCS.rglob("*.md"):
        for block in blocks(page):
            options = json.loads(block["options"])
            source = (page.parent / block["path"]).resolve()
            assert block["code"] == excerpt(source, options), (
                f"{page.name}: the code inlined from {block['path']} {options} differs from "
                "the example: run python -m tests.test_docs_plain"
            )
            found += 1
    assert found >= 10  # the tutorial's and the embedding guide's


def regenerate() -> None:
    """Rewrite every inlined block from its source (after an example changed)."""
    for page in DOCS.rglob("*.md"):
        text = page.read_text()

        def fresh(block: re.Match[str], page: Path = page) -> str:
            source = (page.parent / block["path"]).resolve()
            code = excerpt(source, json.loads(block["options"]))
            head = f"<!-- inlined from {block['path']} {block['options']} -->"
            return f"{head}\n```{block['language']}\n{code}```\n"

        page.write_text(_INLINED.sub(fresh, text))


if __name__ == "__main__":
    regenerate()
