"""Emu's build in the key of torch.compile's caches.

Inductor and AOTAutograd keep compiled graphs on disk (``/tmp/torchinductor_<user>``) under a key
made of the graph, its inputs, PyTorch's own sources and Inductor's configuration. Code outside
PyTorch that decides what a graph compiles to is not in it: emu's fake convolution
(``fake_convolution.py``) and code generation (``inductor.py``), and the C++ kernels whose result
strides the compiled code asserts. So after an upgrade or a rebuild of torch-emu, a cached graph
from the old build would be loaded and fail (``assert_size_stride``) or run the old code. Emu adds
its build to the key through PyTorch's own tag (``torch.compiler.config.cache_key_tag``), when the
emu runtime starts: a program that never uses emu keeps PyTorch's keys unchanged.
"""

import hashlib
from pathlib import Path

import torch

_PACKAGE = Path(__file__).resolve().parent.parent


# LITERALINCLUDE START: CACHE_KEY_TAG
def build_files() -> list[Path]:
    """The files whose change can change what an emu graph compiles to."""
    return sorted(_PACKAGE.glob("_C*.so")) + sorted((_PACKAGE / "compile").glob("*.py"))


def build_tag(files: list[Path]) -> str:
    """``torch_emu-<version>-<digest>``: the digest covers each file's name, size and time of
    last change, which a rebuild or an edit changes."""
    from .. import __version__

    digest = hashlib.sha256()
    for path in files:
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return f"torch_emu-{__version__}-{digest.hexdigest()[:16]}"


def tag_compile_caches() -> None:
    """Adds emu's build to the caches' key tag, after any tag of the user's own."""
    tag = build_tag(build_files())
    config = torch.compiler.config
    if tag not in config.cache_key_tag.split("|"):
        config.cache_key_tag = f"{config.cache_key_tag}|{tag}" if config.cache_key_tag else tag
# LITERALINCLUDE END: CACHE_KEY_TAG
