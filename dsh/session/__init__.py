"""Sessions: the append-only log, its in-memory form, its JSON codec, the base every store builds
on, replay verification, events as text. Imports only the layers below.

Every module here is private; plugins use :mod:`dsh.plugin`, hosts :mod:`dsh`.
"""
