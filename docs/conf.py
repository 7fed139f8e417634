"""Sphinx configuration for the dsh docs (MyST Markdown)."""

project = "dsh"
author = "the dsh authors"
copyright = "2026, the dsh authors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
suppress_warnings = ["myst.xref_missing"]
