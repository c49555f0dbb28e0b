"""torch-emu-kit: what a vendor of a PrivateUse1 backend runs in their own environment, where
torch-emu is not installed (one backend owns PrivateUse1): the conformance suite
(``conformance/``, also the runner of PyTorch's own device-generic test files), the scaffold of a
new backend (``scaffold/``) and the tutorial runner (``tutorial.py``). It needs torch and nothing
of torch-emu; ``cli.py`` is its command line."""
