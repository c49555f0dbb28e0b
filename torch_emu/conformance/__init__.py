"""Conformance suite: checks any loaded PrivateUse1 backend through public PyTorch APIs only.

``python -m torch_emu conformance`` runs it (see docs/guide/conformance.md). The tiers live in
``checks/<tier>.py``; ``runner.py`` runs each tier in a fresh process with a timeout, and
``worker.py`` is that process. The worker and the check modules are loaded by file path, never as
part of the ``torch_emu`` package, so checking another vendor's backend does not load emu.
"""

from .runner import main  # noqa: F401
