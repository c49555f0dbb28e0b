"""tpldev's own tests: device, copies, an op through the fallback, RNG and out-of-memory."""

import gc

import pytest
import torch

import torch_tpldev  # noqa: F401  (already loaded by `import torch` when installed)


def test_device_module():
    assert torch.tpldev.is_available() and torch.tpldev.device_count() >= 1
    assert torch.accelerator.current_accelerator().type == "tpldev"
    x = torch.empty(3, device="tpldev")
    assert x.device == torch.device("tpldev", torch.tpldev.current_device()) and x.is_tpldev


def test_bad_device_index():
    with pytest.raises(RuntimeError, match="invalid device"):
        torch.empty(1, device=f"tpldev:{torch.tpldev.device_count()}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64])
def test_round_trip(dtype):
    x = (torch.randn(5, 7) * 10).to(dtype)
    assert torch.equal(x.to("tpldev").cpu(), x)
    assert torch.equal(x.t().to("tpldev").cpu(), x.t())


def test_op_through_fallback():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    got = (a.to("tpldev") @ b.to("tpldev")).relu().sum(0)
    assert got.device.type == "tpldev"
    torch.testing.assert_close(got.cpu(), (a @ b).relu().sum(0))


@pytest.mark.parametrize("module", [torch.nn.BatchNorm1d(3), torch.nn.InstanceNorm1d(3, track_running_stats=True)])
def test_norm_running_statistics(module):
    x = torch.randn(4, 3, 5)
    device_module = type(module)(3, track_running_stats=True).to("tpldev")
    for _ in range(2):
        torch.testing.assert_close(device_module(x.to("tpldev")).cpu(), module(x))
    for name, buffer in module.named_buffers():
        torch.testing.assert_close(dict(device_module.named_buffers())[name].cpu(), buffer)


def test_mixed_devices_raise():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="tpldev") + torch.ones(3)


def test_rng_reproduces():
    torch.tpldev.manual_seed(42)
    a = torch.randn(100, device="tpldev")
    torch.tpldev.manual_seed(42)
    assert torch.equal(a.cpu(), torch.randn(100, device="tpldev").cpu())
    g = torch.Generator(device="tpldev").manual_seed(3)
    b = torch.rand(10, device="tpldev", generator=g)
    assert torch.equal(b.cpu(), torch.rand(10, device="tpldev", generator=g.manual_seed(3)).cpu())
    with pytest.raises(RuntimeError, match="generator"):
        torch.rand(3, device="tpldev", generator=torch.Generator())


def test_out_of_memory_raises():
    gc.collect()
    before = torch.tpldev.memory_allocated()
    _, total = torch.tpldev.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total + 1, dtype=torch.uint8, device="tpldev")
    assert torch.tpldev.memory_allocated() == before
    x = torch.empty(1 << 20, dtype=torch.uint8, device="tpldev")
    assert torch.tpldev.memory_allocated() >= before + (1 << 20)
    del x
    assert torch.tpldev.memory_allocated() == before
