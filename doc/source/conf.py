"""Sphinx configuration of vgpu-driver's documentation.

Built by ``tests/unit/test_docs.py`` with warnings as errors, so a page
that stops matching the code fails the test suite.
"""

project = "vgpu-driver"
copyright = "vgpu-driver authors"
extensions = ["oslo_config.sphinxext", "reno.sphinxext"]
master_doc = "index"
exclude_patterns: list[str] = []
html_theme = "alabaster"
