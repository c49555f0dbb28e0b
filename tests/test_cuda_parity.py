"""torch.emu has every public name of torch.cuda, with its signature, or says
why a name cannot apply (torch_emu.emu.parity.NOT_APPLICABLE). Fails when
PyTorch adds a torch.cuda name torch.emu lacks, so parity cannot silently
regress. The semantics of each name are tested in test_device_api_parity.py."""

import importlib
import inspect
import re
import types
from pathlib import Path

import pytest
import torch

from torch_emu.emu.parity import NOT_APPLICABLE, CannotApplyOnEmu

# LITERALINCLUDE START: PARITY_RULE
# The names compared: torch.cuda.__all__ minus its submodules, the legacy typed
# tensor/storage classes (FloatTensor, FloatStorage...: CUDA-typed tensors
# torch.Tensor(device=...) replaced) and `cudart` (the CUDA runtime library's
# own bindings). "CUDA"/"Cuda"/"cuda" inside a name reads "Emu"/"Emu"/"emu"
# (CudaError -> EmuError, cudaStatus -> emuStatus).
EXCLUDED = {"cudart"}


def cuda_public_names() -> list[str]:
    return sorted(
        name
        for name in torch.cuda.__all__
        if not isinstance(getattr(torch.cuda, name), types.ModuleType)
        and not name.endswith(("Tensor", "Storage"))
        and name not in EXCLUDED
    )


def emu_name(cuda_name: str) -> str:
    return re.sub("CUDA|Cuda", "Emu", cuda_name).replace("cuda", "emu")


# Of the submodules, `comm` is compared too: its collectives are not CUDA-specific.
COMPARED_SUBMODULES = ["comm"]
# LITERALINCLUDE END: PARITY_RULE


def test_every_cuda_name_is_on_emu_or_not_applicable():
    missing = [
        name
        for name in cuda_public_names()
        if not hasattr(torch.emu, emu_name(name))
        and emu_name(name) not in NOT_APPLICABLE
    ]
    assert missing == [], f"torch.cuda names missing from torch.emu: {missing}"


def test_not_applicable_list_is_short_and_names_cuda_names():
    assert set(NOT_APPLICABLE) <= {emu_name(n) for n in cuda_public_names()}
    assert len(NOT_APPLICABLE) <= 8
    assert all(len(reason) > 20 for reason in NOT_APPLICABLE.values())


@pytest.mark.parametrize("name", sorted(NOT_APPLICABLE))
def test_not_applicable_names_raise_their_reason(name):
    obj = getattr(torch.emu, name)
    call = obj.create if isinstance(obj, type) else obj
    with pytest.raises(CannotApplyOnEmu, match=re.escape(NOT_APPLICABLE[name])):
        call()
    assert issubclass(CannotApplyOnEmu, RuntimeError)


@pytest.mark.parametrize("module", COMPARED_SUBMODULES)
def test_compared_submodules_match(module):
    cuda_module = importlib.import_module(f"torch.cuda.{module}")
    emu_module = getattr(torch.emu, module)
    for name in cuda_module.__all__:
        assert _parameter_names(getattr(emu_module, name)) == _parameter_names(getattr(cuda_module, name)), name


def _parameter_names(obj) -> list[str] | None:
    """Parameter names, renamed as names are (``cuda_graph`` -> ``emu_graph``)."""
    try:
        return [emu_name(p) for p in inspect.signature(obj).parameters]
    except (TypeError, ValueError):  # builtins (exception classes) have none
        return None


@pytest.mark.parametrize("name", cuda_public_names())
def test_signature_matches(name):
    assert hasattr(torch.emu, emu_name(name)), f"torch.emu.{emu_name(name)} is missing"
    cuda_obj, emu_obj = getattr(torch.cuda, name), getattr(torch.emu, emu_name(name))
    if not callable(cuda_obj):  # has_half, default_generators...
        assert type(emu_obj) is type(cuda_obj)
        return
    assert callable(emu_obj)
    expected = _parameter_names(cuda_obj)
    if expected is not None:
        assert _parameter_names(emu_obj) == expected


def test_docs_table_lists_every_implemented_name():
    """The parity table of the Python frontend chapter cannot drift: each name
    torch.emu implements must appear in it."""
    chapter = (Path(__file__).parents[1] / "docs/guide/python_frontend.md").read_text()
    section = chapter.split("## `torch.emu` and `torch.cuda`")[1].split("\n## ")[0]
    listed = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", section))
    implemented = {emu_name(n) for n in cuda_public_names()} - set(NOT_APPLICABLE)
    assert sorted(implemented - listed) == []
