"""Conformance suite: checks any loaded PrivateUse1 backend through public PyTorch APIs only.

``torch-emu-kit conformance`` runs it (see docs/guide/conformance.md). The tiers live in
``checks/<tier>.py``; ``runner.py`` runs each tier in a fresh process with a timeout, and
``worker.py`` is that process. ``upstream.py`` runs PyTorch's own device-generic test files on the
backend and on CPU, paired, with ``upstream_worker.py`` as its process. The workers and the check
modules are loaded by file path, so the only backend in their process is the one under test.
"""
