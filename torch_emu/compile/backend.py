"""``torch.compile(model, backend="emu")``: the Dynamo backend named after the
device, as vendors register theirs.

It is found through the ``torch_dynamo_backends`` entry point in
pyproject.toml, which Dynamo reads the first time a backend name is looked up
or listed, so neither ``import torch`` nor ``import torch_emu`` imports Dynamo
for it. It compiles with Inductor, whose emu registration (``inductor.py``)
generates C++ kernels launched on the current emu stream.
"""

# LITERALINCLUDE START: DYNAMO_BACKEND
from typing import Any


def emu_backend(gm, example_inputs, mode: str | None = None, options: dict[str, Any] | None = None):
    """Compiles a Dynamo graph with Inductor. ``mode`` and ``options`` are
    torch.compile's, with the meaning they have for ``backend="inductor"``."""
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    if mode is not None and options is not None:
        raise RuntimeError("torch.compile(backend='emu'): pass either mode or options, not both")
    config_patches = {**(list_mode_options(mode) if mode else {}), **(options or {})}
    return compile_fx(gm, example_inputs, config_patches=config_patches)
# LITERALINCLUDE END: DYNAMO_BACKEND
