"""Talking to models: the LLM service, the SSE parser and the HTTP stream reader adapters use, the
block assembler (chunks → message), the system prompt. Imports only the layers below (values,
hooks).

Every module here is private; plugins use :mod:`dsh.plugin`, hosts :mod:`dsh`.
"""
