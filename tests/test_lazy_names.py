"""The lazy names of a package (:mod:`dsh._lazy`): imported on first use, then held by the
package, so that later reads are plain attribute reads and not calls of its ``__getattr__``."""

from __future__ import annotations

import json
import sys
import types

import pytest

from dsh._lazy import imported


def test_a_lazy_name_once_read_is_held_by_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    package = types.ModuleType("lazy_package")
    monkeypatch.setitem(sys.modules, "lazy_package", package)
    homes = {"dumps": "json", "encode": "json:JSONEncoder"}
    assert "dumps" not in vars(package)
    assert imported("lazy_package", "dumps", homes) is json.dumps
    assert imported("lazy_package", "encode", homes) is json.JSONEncoder
    assert vars(package)["dumps"] is json.dumps
    assert vars(package)["encode"] is json.JSONEncoder


def test_a_name_the_package_does_not_offer_is_an_attribute_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = types.ModuleType("lazy_package")
    monkeypatch.setitem(sys.modules, "lazy_package", package)
    with pytest.raises(AttributeError, match="module 'lazy_package' has no attribute 'nope'"):
        imported("lazy_package", "nope", {})
    assert "nope" not in vars(package)
