"""The values every layer shares: content, chunks, requests, events, errors, config, agent options,
token counts. Imports nothing of dsh above it.

Every module here is private; plugins use :mod:`dsh.plugin`, hosts :mod:`dsh`.
"""
