"""The application: the harness that wires plugins, config and services; one-call runs; the cluster
client; the user config directory (keys, aliases, model lists); logging. Imports only the layers
below.

Every module here is private; plugins use :mod:`dsh.plugin`, hosts :mod:`dsh`.
"""
