"""Sphinx configuration of the torch-emu documentation (Sphinx + MyST).

Build: python -m sphinx -W --keep-going -b html docs docs/_build/html
The build needs no network and no theme package beyond Sphinx itself.
"""

project = "torch-emu"
author = "torch-emu contributors"
copyright = "torch-emu contributors"
release = "0.1.0"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# Headings get anchors so that chapters can link to sections (page.md#anchor).
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = "torch-emu"
html_theme_options = {
    "description": "A PrivateUse1 accelerator backend on an emulated device",
    "fixed_sidebar": True,
}
pygments_style = "sphinx"
