"""A module for ``tests/test_entrypoints.py`` to load entry points from."""


class Plugin:
    name = "loadable"
