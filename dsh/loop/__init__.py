"""The agent loop: agents, turns and steps, tool dispatch, the inbox, crash recovery, sub-agent
families, typed output. Imports only the layers below.

Every module here is private; plugins use :mod:`dsh.plugin`, hosts :mod:`dsh`.
"""
