"""torch.compile (Inductor and AOT eager) and torch.export give eager's results on the device, forward and backward."""

import copy

import torch

TIER = "compile"
CHAPTER = "compiler"
ORDER = 110


def fn(x, y):
    return (x @ y).relu().sum(1) * 2 + x.mean()


def require_inductor(dev):
    """Inductor compiles for a device only with a Dynamo device interface and a code generator for it:
    without them, say that, rather than Inductor's lowering error that names neither."""
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration

    try:
        get_interface_for_device(dev)
    except NotImplementedError:
        raise AssertionError(f"no Dynamo device interface is registered for {dev!r} "
                             "(torch._dynamo.device_interface.register_interface_for_device)") from None
    init_backend_registration()
    if get_scheduling_for_device(dev) is None:
        raise AssertionError(f"no Inductor code generator is registered for {dev!r} "
                             "(torch._inductor.codegen.common.register_backend_for_device)")


def check_inductor(dev):
    """torch.compile with the default (Inductor) backend matches eager on device tensors, output on the device."""
    require_inductor(dev)
    torch._dynamo.reset()
    x, y = torch.randn(8, 16, device=dev), torch.randn(16, 4, device=dev)
    out = torch.compile(fn)(x, y)
    assert out.device.type == dev
    torch.testing.assert_close(out.cpu(), fn(x, y).cpu())


def check_aot_eager(dev):
    """torch.compile(backend="aot_eager") matches eager (the traced graph runs the backend's own kernels)."""
    torch._dynamo.reset()
    x, y = torch.randn(8, 16, device=dev), torch.randn(16, 4, device=dev)
    torch.testing.assert_close(torch.compile(fn, backend="aot_eager")(x, y).cpu(), fn(x, y).cpu())


def check_dynamic_shapes(dev):
    """A function compiled with dynamic=True gives correct results for several input sizes."""
    require_inductor(dev)
    torch._dynamo.reset()
    compiled = torch.compile(fn, dynamic=True)
    for n in (3, 7, 12):
        x, y = torch.randn(n, 5, device=dev), torch.randn(5, 2, device=dev)
        torch.testing.assert_close(compiled(x, y).cpu(), fn(x, y).cpu())


def check_compiled_backward(dev):
    """A compiled model's gradients equal the eager model's."""
    require_inductor(dev)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 1)).to(dev)
    twin = copy.deepcopy(model)
    x = torch.randn(10, 6, device=dev)
    model(x).square().mean().backward()
    torch.compile(twin)(x).square().mean().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), atol=1e-5, rtol=1e-5)


def check_export(dev):
    """torch.export of a module on the device runs and matches the module."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).to(dev)
    x = torch.randn(5, 4, device=dev)
    program = torch.export.export(model, (x,))
    torch.testing.assert_close(program.module()(x).cpu(), model(x).cpu())
