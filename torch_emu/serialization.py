"""Serialization of emu tensors and their backend metadata.

``torch.save`` and ``torch.load`` need nothing from this module: they find
the emu device through the renamed PrivateUse1 backend and the registered
``torch.emu`` module (see ``docs/guide/serialization.md``). This module adds:

* the Python API of the emu *format tag*, a private-layout id kept in the
  tensor's ``c10::BackendMeta`` (``csrc/core/EmuSerialization.{h,cpp}``),
  which ``torch.save``/``torch.load``, ``clone`` and ``copy.deepcopy`` carry;
* the piece of ``copy.deepcopy`` that PyTorch leaves to backends: copying that
  metadata to the new tensor;
* ``"emu"`` device names for ``safetensors``, whose loader only knows the
  device types built into it.
"""

import functools
import importlib.abc
import importlib.util
import sys
import threading
from typing import Any

import torch

from . import _C

__all__ = ["set_format_tag", "get_format_tag"]


# LITERALINCLUDE START: FORMAT_TAG_API
def set_format_tag(tensor: torch.Tensor, tag: int) -> None:
    """Tags the emu tensor ``tensor`` with the private format id ``tag``.

    ``tag`` is an int >= 0; 0 means "no private format" and removes the tag.
    The tag belongs to this tensor object (its ``TensorImpl``), not to its
    storage: views and other tensors sharing the memory are not tagged. It is
    kept by ``torch.save``/``torch.load`` (onto any emu device), ``clone()``,
    ``copy.deepcopy``, ``detach()`` and ``nn.Parameter``; loading onto the CPU
    drops it.

    Raises ``TypeError`` if ``tensor`` is not a tensor or ``tag`` not an int,
    ``ValueError`` for a negative tag, ``RuntimeError`` for a tensor that is
    not on an emu device.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"set_format_tag expects a torch.Tensor, got {type(tensor).__name__}")
    if isinstance(tag, bool) or not isinstance(tag, int):
        raise TypeError(f"set_format_tag expects an int tag, got {type(tag).__name__}")
    _C._set_format_tag(tensor, tag)


def get_format_tag(tensor: torch.Tensor) -> int:
    """The format tag of ``tensor``: 0 if it has none (and for any tensor
    that is not on an emu device)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"get_format_tag expects a torch.Tensor, got {type(tensor).__name__}")
    return _C._get_format_tag(tensor)
# LITERALINCLUDE END: FORMAT_TAG_API


# LITERALINCLUDE START: DEEPCOPY
# Tensor.__deepcopy__ copies a tensor that has storage by deep-copying the
# storage and pointing a fresh tensor (new_empty + set_) at it: the new
# TensorImpl never sees the old one, so backend metadata is lost. Copy it here.
_tensor_deepcopy = torch.Tensor.__deepcopy__


@functools.wraps(_tensor_deepcopy)
def _deepcopy_keeping_backend_meta(self: torch.Tensor, memo: dict) -> torch.Tensor:
    new_tensor = _tensor_deepcopy(self, memo)
    if (
        self.device.type == "emu"
        and isinstance(new_tensor, torch.Tensor)
        and new_tensor is not self
        and new_tensor.device == self.device
        and _C._get_format_tag(self) != _C._get_format_tag(new_tensor)
    ):
        _C._copy_backend_meta(self, new_tensor)
    return new_tensor


torch.Tensor.__deepcopy__ = _deepcopy_keeping_backend_meta
# LITERALINCLUDE END: DEEPCOPY


# LITERALINCLUDE START: SAFETENSORS
# safetensors' (Rust) loader accepts "cpu", a fixed list of accelerator names
# and plain device indices; an index means "this device of the current
# accelerator", which is emu. So "emu", "emu:N" and torch.device("emu", N)
# are passed on as the index N.
def _safetensors_device(device: Any) -> Any:
    if isinstance(device, str) and (device == "emu" or device.startswith("emu:")):
        device = torch.device(device)
    if not isinstance(device, torch.device) or device.type != "emu":
        return device
    index = device.index if device.index is not None else torch.emu.current_device()
    count = torch.emu.device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Cannot load safetensors onto {device}: there are {count} emu devices "
            f"(emu:0 to emu:{count - 1})"
        )
    return index


def _wrap_safe_open(safe_open: Any) -> Any:
    if getattr(safe_open, "_emu_devices", False):
        return safe_open

    @functools.wraps(safe_open)
    def safe_open_emu(filename, framework, device="cpu", *args, **kwargs):
        return safe_open(filename, framework, *args, device=_safetensors_device(device), **kwargs)

    safe_open_emu._emu_devices = True
    return safe_open_emu


def _patch_safetensors(module: Any) -> None:
    # safetensors.torch imports safe_open from the package: patching the
    # package before safetensors.torch is imported covers load_file/load_model.
    module.safe_open = _wrap_safe_open(module.safe_open)
    # If safetensors.torch is mid-import (it imports torch, which loads
    # torch-emu), it has no safe_open yet and will take the patched one.
    submodule = sys.modules.get("safetensors.torch")
    if submodule is not None and hasattr(submodule, "safe_open"):
        submodule.safe_open = _wrap_safe_open(submodule.safe_open)


class _SafetensorsImportHook(importlib.abc.MetaPathFinder):
    """Patches safetensors when (and only if) the program imports it, so that
    ``import torch`` does not import safetensors."""

    def __init__(self) -> None:
        self._finding = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "safetensors" or getattr(self._finding, "active", False):
            return None
        self._finding.active = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding.active = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch_safetensors(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = exec_and_patch
        return spec


if "safetensors" in sys.modules:
    _patch_safetensors(sys.modules["safetensors"])
else:
    sys.meta_path.insert(0, _SafetensorsImportHook())
# LITERALINCLUDE END: SAFETENSORS
