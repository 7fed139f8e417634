"""``summary``: what the policy does with every call of a tool, as ``dsh tools`` shows it."""

from __future__ import annotations

from dsh_plugins.permissions.policy import PermissionsConfig, Rule, summary


def test_the_mode_decides_without_rules() -> None:
    config = PermissionsConfig()
    assert summary(config, "read_file", "read") == "allow (workspace-write mode)"
    assert summary(config, "shell", "execute") == "ask (workspace-write mode)"
    assert summary(config, "write_file", "write") == (
        "allow in the workspace, ask outside (workspace-write mode)"
    )
    assert summary(PermissionsConfig(mode="full"), "write_file", "write") == "allow (full mode)"
    assert summary(PermissionsConfig(mode="read-only"), "x", "other") == "ask (read-only mode)"


def test_the_first_rule_for_every_call_decides_and_narrower_rules_are_named() -> None:
    rules = (
        Rule("allow", "shell", "git *"),
        Rule("ask", "sh*", "rm *"),
        Rule("deny", "web_*"),
        Rule("allow", "shell"),
    )
    config = PermissionsConfig(rules=rules)
    assert summary(config, "shell", "execute") == (
        "allow (rule 4); rules 1, 2 may decide some calls"
    )
    assert summary(config, "web_fetch", "read") == "deny (rule 3)"
    assert summary(config, "shout", "other") == (
        "allow (workspace-write mode); rule 2 may decide some calls"
    )
