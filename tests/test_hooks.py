"""PrivateUse1 hooks, observed through the PyTorch features that use them."""


import pytest
import torch
from _after_import import run_after_import


def test_storage_resize_keeps_contents():
    t = torch.arange(4.0).emu()
    s = t.untyped_storage()
    s.resize_(64)
    assert s.nbytes() == 64 and s.device == torch.device("emu:0")
    assert torch.equal(t.cpu(), torch.arange(4.0))  # prefix preserved, same storage
    s.resize_(8)
    assert torch.equal(torch.empty(0, device="emu").set_(s).view(torch.float32).cpu(), torch.arange(2.0))


@pytest.mark.launch_mode
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
    r = run_after_import(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


def test_device_capability_lists_dtypes_that_really_work():
    """torch.accelerator.get_device_capability: every dtype it reports can be
    allocated on emu and converted to and from float32 there, as on CPU."""
    import pytest

    caps = torch.accelerator.get_device_capability("emu:1")
    dtypes = caps["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64} <= set(dtypes)
    assert not {torch.bits8, torch.int4, torch.uint3, torch.float4_e2m1fn_x2} & set(dtypes)  # no kernels anywhere
    quantized = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
    assert quantized <= set(dtypes)
    for dtype in dtypes:
        src = torch.tensor([0.0, 1.0, 2.0])
        if dtype in quantized:  # made by quantizing, not by a cast
            q = torch.quantize_per_tensor(src.to("emu"), 0.5, 1, dtype)
            assert q.dtype == dtype and q.device.type == "emu"
            expected = torch.quantize_per_tensor(src, 0.5, 1, dtype).dequantize()
            torch.testing.assert_close(q.dequantize().cpu(), expected, rtol=0, atol=0)
            continue
        on_emu = src.to("emu").to(dtype)
        assert on_emu.dtype == dtype and on_emu.device.type == "emu"
        torch.testing.assert_close(on_emu.float().cpu(), src.to(dtype).float(), rtol=0, atol=0, equal_nan=True)
    assert torch.accelerator.get_device_capability() == torch.accelerator.get_device_capability("emu:0")
    with pytest.raises(RuntimeError, match="emu"):
        torch.accelerator.get_device_capability("emu:7")
