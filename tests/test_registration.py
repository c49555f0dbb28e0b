"""Every operator registration scenario (docs/guide/registration.md), in C++
(examples/registration/csrc/) and in Python (examples/registration/torch_emu_examples/),
checked against CPU; and the backend without them."""

import textwrap

import pytest
import torch
import torch.nn.functional as F
from _after_import import run_after_import

import torch_emu_examples  # noqa: F401  (the examples load only when imported)
from torch_emu_examples import custom_ops, fallbacks, native_python, overrides

C = torch._C


def has_kernel(op: str, key: str) -> bool:
    return C._dispatch_has_kernel_for_dispatch_key(op, key)


# --- Every scenario: the registered kernels bypass the global fallback -----


def test_registered_kernels_bypass_the_global_fallback():
    import torch_emu.tools as tools

    x = torch.randn(4, 4, device="emu")
    with tools.fallback_report() as report:
        F.hardswish(x)                          # 1. native kernel
        torch.full((3,), 2.0, device="emu")     # 2. fill_ through fill_stub
        torch.abs(x)                            # 2. abs.out through abs_stub
        torch.square(x)                         # 6. composite op overridden
        torch.ops.emu.scaled_gelu(x, 2.0)       # 3. custom op, native emu kernel
        torch.ops.emu.fused_linear_relu(x, x)   # 4.
        torch.ops.emu.round_to_grid(x, 0.5)     # 6. fallthrough op
    recorded = {name for name, _, _ in report.records}
    for op in ("aten::hardswish", "aten::fill_.Scalar", "aten::abs.out", "aten::square", "aten::pow.Tensor_Scalar"):
        assert op not in recorded
    assert not {name for name in recorded if name.startswith("emu::")}


# --- Scenario 1: a built-in aten op with a native emu kernel -----------------


def test_native_kernel_is_registered_unboxed_and_matches_cpu():
    assert has_kernel("aten::hardswish", "PrivateUse1")
    x = torch.linspace(-5, 5, 101).reshape(101, 1).expand(101, 3)  # non-contiguous input
    y = F.hardswish(x.to("emu"))
    assert y.device.type == "emu" and y.is_contiguous()
    torch.testing.assert_close(y.cpu(), F.hardswish(x))
    for dtype in (torch.float64, torch.bfloat16):
        torch.testing.assert_close(F.hardswish(x.to("emu", dtype)).cpu(), F.hardswish(x.to(dtype)))


def test_native_kernel_gradient_matches_cpu():
    x = torch.randn(16, requires_grad=True)
    xe = x.detach().to("emu").requires_grad_()
    F.hardswish(x).sum().backward()
    F.hardswish(xe).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)


@pytest.mark.launch_mode
def test_native_kernel_runs_on_the_current_stream():
    x = torch.randn(1 << 12)
    s = torch.emu.Stream()
    with torch.emu.stream(s):
        xe = x.to("emu")
        y = F.hardswish(xe)
    s.synchronize()
    torch.testing.assert_close(y.cpu(), F.hardswish(x))


def test_python_kernel_for_aten_op_is_scoped():
    assert not has_kernel("aten::trace", "PrivateUse1")
    x = torch.arange(16.0).reshape(4, 4)
    with native_python.prototype_kernels():
        assert has_kernel("aten::trace", "PrivateUse1")
        assert torch.trace(x.to("emu")).item() == torch.trace(x).item()
        assert torch.trace(x.int().to("emu")).dtype == torch.trace(x.int()).dtype
    assert not has_kernel("aten::trace", "PrivateUse1")
    assert torch.trace(x.to("emu")).item() == torch.trace(x).item()  # the fallback again


# --- Scenario 2: DispatchStub -----------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8,
                                   torch.bool, torch.complex64, torch.uint16, torch.float8_e4m3fn])
def test_fill_stub_matches_cpu(dtype):
    value = True if dtype == torch.bool else 3
    base = torch.zeros(5, 7, dtype=dtype)
    e = base.to("emu")
    e[1:4, ::2].fill_(value)  # a strided view: the iterator walks it
    base[1:4, ::2].fill_(value)
    assert torch.equal(e.cpu().view(torch.uint8), base.view(torch.uint8))  # bit for bit


def test_fill_stub_is_the_emu_path():
    # fill_ on emu is the device-generic at::native::fill_, which calls the stub.
    assert has_kernel("aten::fill_.Scalar", "PrivateUse1")
    assert torch.full((3,), 2.5, device="emu").tolist() == [2.5, 2.5, 2.5]
    assert torch.ones(2, 2, device="emu").sum().item() == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                                   torch.int8, torch.uint8, torch.complex64])
def test_abs_stub_matches_cpu(dtype):
    x = (torch.randn(6, 5) * 100).to(dtype)
    got = torch.abs(x.to("emu").t()).cpu()  # non-contiguous input
    assert got.dtype == torch.abs(x.t()).dtype
    torch.testing.assert_close(got, torch.abs(x.t()))
    out = torch.empty(0, dtype=torch.abs(x).dtype, device="emu")
    torch.abs(x.to("emu"), out=out)  # abs.out itself, resizing its output
    torch.testing.assert_close(out.cpu(), torch.abs(x))


def test_abs_gradient_matches_cpu():
    x = torch.tensor([-2.0, -0.5, 1.0, 3.0], requires_grad=True)
    xe = x.detach().to("emu").requires_grad_()
    x.abs().sum().backward()
    xe.abs().sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)


# --- Scenario 3: custom operators with autograd and torch.compile ------------


def scaled_gelu_reference(x, scale):
    return F.gelu(x) * scale


@pytest.mark.parametrize("op", [torch.ops.emu.scaled_gelu, custom_ops.scaled_gelu], ids=["cpp", "python"])
def test_custom_op_forward_backward_match_reference(op):
    x = torch.randn(4, 6, requires_grad=True)
    xe = x.detach().to("emu").requires_grad_()
    ref = scaled_gelu_reference(x, 1.5)
    ye = op(xe, 1.5)
    assert ye.device.type == "emu"
    torch.testing.assert_close(ye.cpu(), ref.detach())
    torch.testing.assert_close(op(x.detach(), 1.5), ref.detach())  # the CPU kernel
    g = torch.randn(4, 6)
    ref.backward(g)
    ye.backward(g.to("emu"))
    torch.testing.assert_close(xe.grad.cpu(), x.grad)


@pytest.mark.parametrize("op", [torch.ops.emu.scaled_gelu.default, custom_ops.scaled_gelu], ids=["cpp", "python"])
@pytest.mark.parametrize("device", ["cpu", "emu"])
def test_custom_op_opcheck(op, device):
    x = torch.randn(3, 5, device=device, requires_grad=True)
    checks = ["test_schema", "test_faketensor", "test_aot_dispatch_dynamic"]
    if device == "cpu":
        checks.append("test_autograd_registration")  # opcheck knows only CPU/CUDA/XPU for this one
    torch.library.opcheck(op, (x, 0.5), test_utils=checks)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("op", [torch.ops.emu.scaled_gelu, custom_ops.scaled_gelu], ids=["cpp", "python"])
def test_custom_op_under_torch_compile(op, backend):
    torch._dynamo.reset()

    def fn(x):
        return op(x * 2, 0.5).sum()

    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(8, 3)
    xe = x.to("emu").requires_grad_()
    xc = x.clone().requires_grad_()
    out = compiled(xe)
    ref = scaled_gelu_reference(xc * 2, 0.5).sum()
    torch.testing.assert_close(out.cpu(), ref.detach())
    out.backward()
    ref.backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)


def test_python_op_in_cpp_namespace():
    assert has_kernel("emu::clamped_scaled_gelu", "CompositeImplicitAutograd")
    x = torch.linspace(-3, 3, 13, requires_grad=True)
    xe = x.detach().to("emu").requires_grad_()
    ref = scaled_gelu_reference(x, 2.0).clamp_max(1.0)
    ye = torch.ops.emu.clamped_scaled_gelu(xe, 2.0, 1.0)
    torch.testing.assert_close(ye.cpu(), ref.detach())
    ref.sum().backward()
    ye.sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)


# --- Scenario 4: autograd::Function on AutogradPrivateUse1 -------------------


@pytest.mark.parametrize("op", [torch.ops.emu.fused_linear_relu, torch.ops.emu.linear_relu_py], ids=["cpp", "python"])
@pytest.mark.parametrize("bias", [True, False])
def test_autograd_function_matches_cpu(op, bias):
    assert has_kernel(op.default.name(), "AutogradPrivateUse1")
    torch.manual_seed(0)
    x = torch.randn(2, 5, 4, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(3, requires_grad=True) if bias else None
    leaves = [t for t in (x, w, b) if t is not None]
    emu_leaves = [t.detach().to("emu").requires_grad_() for t in leaves]
    ref = F.relu(F.linear(x, w, b))
    out = op(*emu_leaves) if bias else op(*emu_leaves, None)
    assert out.grad_fn is not None
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    g = torch.randn_like(ref)
    ref.backward(g)
    out.backward(g.to("emu"))
    for a, e in zip(leaves, emu_leaves):
        torch.testing.assert_close(e.grad.cpu(), a.grad)


# --- Scenario 5: per-operator fallbacks --------------------------------------


def test_per_op_cpu_fallback_matches_cpu_and_no_copy_fallback():
    x = torch.randn(1000)
    expected = torch.histc(x, bins=10, min=-3, max=3)
    got = torch.histc(x.to("emu"), bins=10, min=-3, max=3)
    assert got.device.type == "emu"
    torch.testing.assert_close(got.cpu(), expected)
    # The same op through the global no-copy fallback: identical results.
    torch.testing.assert_close(torch.ops.aten.histogram.bin_ct(x.to("emu"), 10, range=[-3.0, 3.0])[0].cpu(),
                               expected)


def test_per_op_not_implemented():
    with pytest.raises(NotImplementedError, match="aten::to_mkldnn is not implemented for emu"):
        torch.randn(2, 2, device="emu").to_mkldnn()


def test_python_per_op_fallbacks_are_scoped():
    x = torch.tensor([0, 3, 3, 1])
    with fallbacks.per_op_fallbacks():
        got = torch.bincount(x.to("emu"))
        assert got.device.type == "emu"
        assert got.tolist() == torch.bincount(x).tolist()
        assert has_kernel("aten::mkldnn_rnn_layer", "PrivateUse1")
    assert not has_kernel("aten::bincount", "PrivateUse1")
    assert not has_kernel("aten::mkldnn_rnn_layer", "PrivateUse1")


def test_python_not_implemented_kernel():
    kernel = fallbacks.not_implemented("aten::mkldnn_rnn_layer", "reason")
    with pytest.raises(NotImplementedError, match="aten::mkldnn_rnn_layer is not implemented for emu"):
        kernel(torch.ones(1, device="emu"))


# --- Scenario 6: meta, fallthrough, overriding a composite op ----------------


@pytest.mark.parametrize("op", [torch.ops.emu.scaled_gelu, custom_ops.scaled_gelu], ids=["cpp", "python"])
def test_meta_kernel(op):
    y = op(torch.empty(7, 2, device="meta"), 3.0)
    assert y.device.type == "meta" and y.shape == (7, 2)
    assert torch.ops.emu.fused_linear_relu(torch.empty(5, 4, device="meta"),
                                           torch.empty(3, 4, device="meta")).shape == (5, 3)


@pytest.mark.parametrize("op", [torch.ops.emu.round_to_grid, torch.ops.emu_py.round_to_grid], ids=["cpp", "python"])
def test_fallthrough_autograd(op):
    assert C._dispatch_kernel_for_dispatch_key_is_fallthrough(op.default.name(), "AutogradPrivateUse1")
    x = torch.tensor([0.26, -1.1, 0.74, 2.0], requires_grad=True)
    for t in (x, x.detach().to("emu").requires_grad_()):
        y = op(t, 0.5)
        assert y.cpu().tolist() == [0.5, -1.0, 0.5, 2.0]
        assert not y.requires_grad and y.grad_fn is None  # a constant for autograd


def test_fallthrough_is_needed():
    # Without it, PyTorch's autograd fallback makes the output require grad
    # and warns when backward reaches the op.
    lib = torch.library.Library("emu_test", "DEF")
    try:
        lib.define("round_to_grid(Tensor x, float step) -> Tensor")
        lib.impl("round_to_grid", lambda x, step: torch.round(x / step) * step, "CompositeExplicitAutograd")
        y = torch.ops.emu_test.round_to_grid(torch.ones(2, device="emu", requires_grad=True), 0.5)
        assert y.requires_grad
        with pytest.warns(UserWarning, match="autograd kernel was not registered"):
            y.sum().backward()
    finally:
        lib._destroy()


def test_composite_override_forward_backward():
    assert has_kernel("aten::square", "PrivateUse1") and has_kernel("aten::square", "AutogradPrivateUse1")
    assert has_kernel("aten::square", "CompositeImplicitAutograd")  # CPU still decomposes
    x = torch.randn(5, 3, requires_grad=True)
    xe = x.detach().to("emu").requires_grad_()
    torch.testing.assert_close(torch.square(xe.detach()).cpu(), torch.square(x.detach()))  # emu kernel
    ye = torch.square(xe)
    assert ye.grad_fn is not None
    y = torch.square(x)
    torch.testing.assert_close(ye.detach().cpu(), y.detach())
    y.sum().backward()
    ye.sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)
    for t in (torch.tensor([True, False]), torch.tensor([3, -4]), torch.tensor([1 + 2j])):
        got = torch.square(t.to("emu")).cpu()
        assert got.dtype == torch.square(t).dtype and torch.equal(got, torch.square(t))


def test_python_composite_override_is_scoped():
    x = torch.linspace(-3, 9, 13, requires_grad=True)
    with overrides.relu6_override():
        assert has_kernel("aten::relu6", "PrivateUse1")
        xe = x.detach().to("emu").requires_grad_()
        torch.testing.assert_close(F.relu6(xe.detach()).cpu(), F.relu6(x.detach()))
        ye = F.relu6(xe)
        y = F.relu6(x)
        torch.testing.assert_close(ye.detach().cpu(), y.detach())
        y.sum().backward()
        ye.sum().backward()
        torch.testing.assert_close(xe.grad.cpu(), x.grad)
    assert not has_kernel("aten::relu6", "PrivateUse1")


# --- Without the examples: the backend's own paths ---------------------------


def test_the_backend_without_the_examples():
    # A process that never imports torch_emu_examples: the ops the
    # examples replace take emu's ordinary paths, the example ops do not exist.
    code = textwrap.dedent("""
        import sys
        import torch, torch.nn.functional as F
        import torch_emu.tools as tools
        assert "torch_emu_examples" not in sys.modules
        for namespace, name in [("emu", "scaled_gelu"), ("emu", "fused_linear_relu"), ("emu", "round_to_grid"),
                                ("emu_py", "scaled_gelu")]:
            try:
                getattr(getattr(torch.ops, namespace), name)
            except AttributeError:
                continue
            raise AssertionError(f"{namespace}::{name} exists without the examples")
        x = torch.randn(4, 4)
        with tools.fallback_report() as report:
            on_emu = [F.hardswish(x.to("emu")), torch.full((3,), 2.0, device="emu"), torch.abs(x.to("emu")),
                      torch.square(x.to("emu")), torch.histc(x.to("emu"), bins=4)]
        on_cpu = [F.hardswish(x), torch.full((3,), 2.0), torch.abs(x), torch.square(x), torch.histc(x, bins=4)]
        for a, b in zip(on_emu, on_cpu):
            torch.testing.assert_close(a.cpu(), b)
        # histc runs CPU's kernel on device memory (the global fallback), not the examples' copying fallback
        assert "aten::histc" in {name for name, _, _ in report.records}
        print("ok")
    """)
    result = run_after_import(code, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
