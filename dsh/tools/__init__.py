"""Tools: the registry that runs calls, ``@dsh.tool``, JSON Schema from type hints and the checks
of arguments against it. Imports only the layers below.

Every module here is private; plugins use :mod:`dsh.plugin`, hosts :mod:`dsh`.
"""
