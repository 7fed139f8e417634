"""The examples keep working as the core changes under them.

The host app's own tests run with the suite, in a separate pytest (the app is a script next to
its tests, not a package). The plugin example is a distribution of its own: ``tox -e example``
builds, installs and tests it in a fresh environment.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_host_app_passes_its_tests() -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/host_app"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_approvals_web_host_passes_its_tests() -> None:
    """Approve and deny buttons for parked tool calls (``examples/approvals_web``)."""
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/approvals_web"
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_research_team_passes_its_tests() -> None:
    """Sub-agents and a typed result, through ``dsh.run`` (``examples/research_team``)."""
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/research_team"
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
