"""PrivateUse1 hooks, observed through the PyTorch features that use them."""

import subprocess
import sys

import torch


def test_storage_resize_keeps_contents():
    t = torch.arange(4.0).emu()
    s = t.untyped_storage()
    s.resize_(64)
    assert s.nbytes() == 64 and s.device == torch.device("emu:0")
    assert torch.equal(t.cpu(), torch.arange(4.0))  # prefix preserved, same storage
    s.resize_(8)
    assert torch.equal(torch.empty(0, device="emu").set_(s).view(torch.float32).cpu(), torch.arange(2.0))


def test_pinned_memory_hooks():
    p = torch.ones(16).pin_memory()
    assert p.is_pinned()
    assert not torch.ones(16).is_pinned()
    assert not p.clone().is_pinned()  # a plain CPU clone is pageable


def test_default_generators_per_device():
    g0 = torch.emu.random._generator(0)
    g1 = torch.emu.random._generator(1)
    assert g0.device == torch.device("emu:0") and g1.device == torch.device("emu:1")
    assert torch.Generator("emu").device == torch.device("emu:0")


def test_primary_context_follows_first_use():
    code = (
        "import torch, torch_emu._C as C\n"
        "print(C._is_device_initialized(1))\n"
        "torch.ones(1, device='emu:1')\n"
        "print(C._is_device_initialized(1))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]
