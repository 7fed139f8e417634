"""The hook system: the specs (one per event of the taxonomy), the markers, how hooks are called,
and how plugins are found and loaded. Imports only :mod:`dsh.values`.

Every module here is private; plugins use :mod:`dsh.plugin`, hosts :mod:`dsh`.
"""
