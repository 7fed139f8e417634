"""``terminal_ui``: the terminal side of dsh. This first part renders one agent for a terminal:
its streamed answer, reasoning, tool calls, errors and a usage line per turn."""
