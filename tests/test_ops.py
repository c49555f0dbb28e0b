"""The minimal operator set and the no-copy fallback, checked against CPU."""

import pytest
import torch


def emu(t):
    return t.to("emu")


def test_minimal_ops():
    x = torch.empty(3, 4, device="emu")
    assert x.shape == (3, 4) and x.is_contiguous()
    cl = torch.empty(2, 3, 4, 5, device="emu", memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    s = torch.empty_strided((2, 3), (1, 2), device="emu")
    assert s.stride() == (1, 2)
    base = emu(torch.arange(12.0))
    assert torch.equal(base.view(3, 4).cpu(), torch.arange(12.0).view(3, 4))
    assert torch.equal(base.as_strided((2, 2), (4, 1), 1).cpu(), torch.arange(12.0).as_strided((2, 2), (4, 1), 1))
    assert base.view(3, 4).t().reshape(12).tolist() == torch.arange(12.0).view(3, 4).t().reshape(12).tolist()
    assert base[5].item() == 5.0


def test_resize_keeps_prefix():
    x = emu(torch.arange(6.0))
    x.resize_(10)
    assert x.shape == (10,)
    assert torch.equal(x[:6].cpu(), torch.arange(6.0))
    x.resize_(2, 2)
    assert torch.equal(x.cpu(), torch.arange(4.0).view(2, 2))


def test_set_overloads():
    a = emu(torch.arange(8.0))
    b = torch.empty(0, device="emu")
    b.set_(a)
    assert torch.equal(b.cpu(), a.cpu()) and b.data_ptr() == a.data_ptr()
    c = torch.empty(0, device="emu")
    c.set_(a.untyped_storage(), 2, (2, 3), (3, 1))
    assert torch.equal(c.cpu(), torch.arange(8.0).as_strided((2, 3), (3, 1), 2))
    d = torch.empty(0, device="emu")
    d.set_(a.untyped_storage())
    assert d.shape == (8,)
    assert b.is_set_to(a)
    e = emu(torch.ones(3))
    e.set_()
    assert e.numel() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16, torch.bfloat16])
def test_copies_all_directions(dtype):
    src = torch.arange(24).view(4, 6).to(dtype)
    d0 = src.to("emu:0")
    d1 = d0.to("emu:1")  # peer
    assert d1.device == torch.device("emu:1")
    assert torch.equal(d1.cpu(), src)
    assert torch.equal(d0.t().contiguous().cpu(), src.t().contiguous())  # strided D2D kernel
    assert torch.equal(d0.t().cpu(), src.t())  # strided D2H
    out = torch.empty(6, 4, dtype=dtype, device="emu:1")
    out.copy_(d0.t())  # strided peer
    assert torch.equal(out.cpu(), src.t())
    conv = d0.to(torch.float64)
    assert torch.equal(conv.cpu(), src.to(torch.float64))
    nc = torch.empty(6, 4, dtype=dtype, device="emu").t()
    nc.copy_(src)  # H2D into a non-contiguous destination
    assert torch.equal(nc.cpu(), src)
    bcast = torch.empty(3, 4, 6, dtype=dtype, device="emu")
    bcast.copy_(src)
    assert torch.equal(bcast.cpu(), src.expand(3, 4, 6))


def test_fallback_matches_cpu_on_many_ops():
    torch.manual_seed(0)
    a, b = torch.randn(8, 5), torch.randn(8, 5)
    m = torch.randn(5, 7)
    idx = torch.tensor([0, 3, 3, 7])
    cases = [
        lambda x, y, w, i: x + y * 2,
        lambda x, y, w, i: torch.relu(x) - torch.sigmoid(y),
        lambda x, y, w, i: x @ w,
        lambda x, y, w, i: torch.softmax(x, dim=1),
        lambda x, y, w, i: x.sum(dim=0),
        lambda x, y, w, i: x.max(dim=1).values,
        lambda x, y, w, i: x[i],
        lambda x, y, w, i: torch.cat([x, y], dim=1),
        lambda x, y, w, i: torch.where(x > 0, x, y),
        lambda x, y, w, i: x.index_select(0, i),
        lambda x, y, w, i: torch.sort(x, dim=1).values,
        lambda x, y, w, i: torch.nonzero(x > 0.5),
        lambda x, y, w, i: torch.nn.functional.layer_norm(x, (5,)),
        lambda x, y, w, i: x.unfold(0, 2, 2),
        lambda x, y, w, i: torch.cumsum(x, 0),
        lambda x, y, w, i: torch.topk(x, 2).indices,
    ]
    for f in cases:
        expected = f(a, b, m, idx)
        got = f(emu(a), emu(b), emu(m), emu(idx))
        assert got.device.type == "emu"
        torch.testing.assert_close(got.cpu(), expected)


def test_inplace_and_out_ops():
    x = torch.randn(4, 4)
    y = emu(x)
    y.add_(1).mul_(2)
    torch.testing.assert_close(y.cpu(), (x + 1) * 2)
    out = torch.empty(0, device="emu")  # out= resizes inside the kernel
    torch.add(y, y, out=out)
    assert out.shape == (4, 4)
    torch.testing.assert_close(out.cpu(), (x + 1) * 4)
    r = y.relu_()
    assert r is y


def test_views_share_device_memory():
    y = emu(torch.zeros(4, 4))
    row = y[1]
    row.fill_(3)
    assert y[1].sum().item() == 12
    diag = y.diagonal()
    diag.add_(1)
    assert y.cpu().diagonal().tolist() == [1.0, 4.0, 1.0, 1.0]


def test_overlapping_copy_is_detected_like_cpu():
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.arange(10.0).expand(2, 10).add_(1)
    y = emu(torch.arange(10.0))
    with pytest.raises(RuntimeError, match="single memory location"):
        y.expand(2, 10).add_(1)


def test_autograd_through_fallback():
    x = torch.randn(6, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    (torch.tanh(x @ w) ** 2).sum().backward()
    xe = emu(x.detach()).requires_grad_()
    we = emu(w.detach()).requires_grad_()
    (torch.tanh(xe @ we) ** 2).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)
    torch.testing.assert_close(we.grad.cpu(), w.grad)


def test_factory_ops_with_device_argument():
    assert torch.equal(torch.tril_indices(4, 4, device="emu").cpu(), torch.tril_indices(4, 4))
    assert torch.equal(torch.arange(5, device="emu:1").cpu(), torch.arange(5))
    assert torch.zeros(2, 2, device="emu:1").device == torch.device("emu:1")
    assert torch.full((2,), 7, device="emu").tolist() == [7, 7]


def test_mixed_devices_raise():
    with pytest.raises(RuntimeError, match="same device.*emu:0.*emu:1"):
        torch.ones(3, device="emu:0") + torch.ones(3, device="emu:1")
    with pytest.raises(RuntimeError, match="same device.*cpu"):
        torch.ones(3, device="emu") + torch.ones(3)
    # 0-dim CPU tensors are scalars and fine; CPU indices are allowed as on CUDA.
    assert (torch.ones(3, device="emu") + torch.tensor(2.0)).tolist() == [3, 3, 3]
    assert torch.ones(5, device="emu")[torch.tensor([0, 2])].tolist() == [1, 1]


def test_kernel_errors_are_python_errors(baseline_memory):
    x = torch.ones(3, device="emu")
    with pytest.raises(IndexError):
        x[torch.tensor([5], device="emu")].item()
    with pytest.raises(RuntimeError, match="size of tensor"):
        x + torch.ones(4, device="emu")
    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        torch.ones(2, 3, device="emu") @ torch.ones(2, 3, device="emu")
    assert (x * 2).sum().item() == 6  # the device keeps working


def test_printing_and_numpy_errors():
    x = emu(torch.tensor([1.5, 2.5]))
    assert "device='emu:0'" in repr(x)
    with pytest.raises(TypeError, match="emu"):
        x.numpy()


def test_host_alias_shares_memory_and_keeps_it_alive(baseline_memory):
    from torch_emu import _C

    x = emu(torch.arange(6.0)).view(2, 3)[:, 1:]
    alias = _C._host_alias(x)
    assert alias.device.type == "cpu" and alias.stride() == x.stride()
    alias.mul_(10)
    assert x.cpu().tolist() == [[10.0, 20.0], [40.0, 50.0]]
    del x  # the alias keeps the device memory alive
    assert alias.tolist() == [[10.0, 20.0], [40.0, 50.0]]
    with pytest.raises(RuntimeError, match="emu tensor"):
        _C._host_alias(torch.ones(2))
    del alias


def test_item_of_one_element_tensors():
    assert emu(torch.tensor([5])).item() == 5
    assert emu(torch.tensor([[2.5]])).item() == 2.5
    assert emu(torch.tensor(True)).item() is True
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        emu(torch.ones(2)).item()


ITEM_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
               torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
               torch.complex32, torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("dtype", ITEM_DTYPES, ids=str)
def test_item_reads_the_element_as_cpu_does_in_every_dtype(dtype):
    # .item() copies one element's bytes and makes the Scalar on the host: the
    # element of a view at an offset, every dtype CPU's _local_scalar_dense takes.
    values = torch.tensor([0.0, -3.0, 7.5, 1e4]) if dtype.is_floating_point or dtype.is_complex else \
        torch.tensor([0, 1, 200, 3])
    host = values.to(dtype) if dtype != torch.bool else values.bool()
    if dtype.is_complex:
        host = host * (1 + 2j) if dtype != torch.complex32 else (values.to(torch.complex64) * (1 + 2j)).to(dtype)
    device = emu(host)
    for i in range(4):
        got, want = device[i].item(), host[i].item()
        assert type(got) is type(want) and (got == want or (got != got and want != want)), (i, got, want)
    assert device[2:].view(1, 2)[0, 1].item() == host[3].item()


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.Conv1d(3, 4, 3, padding=1),
        lambda: torch.nn.Conv2d(3, 6, 3, padding=1, groups=3),
        lambda: torch.nn.Conv2d(3, 4, 3, stride=2, bias=False),
        lambda: torch.nn.Conv3d(2, 3, 2),
        lambda: torch.nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1),
    ],
    ids=["conv1d", "conv2d_grouped", "conv2d_nobias_strided", "conv3d", "conv_transpose2d"],
)
def test_convolutions_forward_and_backward_match_cpu(make, baseline_memory):
    import copy

    torch.manual_seed(0)
    conv = make()
    x = torch.randn((2, conv.in_channels) + (8,) * (conv.weight.dim() - 2), requires_grad=True)
    conv_emu = copy.deepcopy(conv).emu()
    x_emu = x.detach().emu().requires_grad_()
    conv(x).square().sum().backward()
    out = conv_emu(x_emu)
    out.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), conv(x).detach())
    torch.testing.assert_close(x_emu.grad.cpu(), x.grad)
    torch.testing.assert_close(conv_emu.weight.grad.cpu(), conv.weight.grad)
    if conv.bias is not None:
        torch.testing.assert_close(conv_emu.bias.grad.cpu(), conv.bias.grad)
    del conv_emu, x_emu, out


# LITERALINCLUDE START: TEST_CONVOLUTION_FORMAT
CONV_CASES = {  # input and weight shapes, transposed, dtype, channels-last format
    "conv2d": ((2, 3, 8, 8), (16, 3, 3, 3), False, torch.float32, torch.channels_last),
    "conv2d_float64": ((2, 3, 8, 8), (16, 3, 3, 3), False, torch.float64, torch.channels_last),
    "conv_transpose2d": ((2, 3, 8, 8), (3, 16, 3, 3), True, torch.float32, torch.channels_last),
    "conv3d": ((2, 3, 4, 4, 4), (8, 3, 3, 3, 3), False, torch.float32, torch.channels_last_3d),
    "conv1d": ((2, 3, 8), (16, 3, 3), False, torch.float32, None),
}


@pytest.mark.parametrize("formats", [("contiguous", "contiguous"), ("contiguous", "channels_last"),
                                     ("channels_last", "contiguous"), ("channels_last", "channels_last")],
                         ids=["contiguous", "weight_cl", "input_cl", "both_cl"])
@pytest.mark.parametrize("case", CONV_CASES)
def test_convolution_strides_are_cpus_and_the_fake_convolutions(case, formats, baseline_memory):
    """A convolution's result and gradients have CPU's strides (channels last
    when the input or the weight is, as PyTorch's module tests expect of every
    device), and the fake convolution, whose strides torch.compile asserts of
    every real result, answers the same on emu."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x_shape, w_shape, transposed, dtype, channels_last = CONV_CASES[case]
    fmt = {"contiguous": torch.contiguous_format, "channels_last": channels_last or torch.contiguous_format}
    x = torch.randn(x_shape, dtype=dtype).to(memory_format=fmt[formats[0]])
    w = torch.randn(w_shape, dtype=dtype).to(memory_format=fmt[formats[1]])
    dims = len(x_shape) - 2
    args = ([1] * dims, [1] * dims, [1] * dims, transposed, [0] * dims, 1)
    channels = w_shape[1] if transposed else w_shape[0]

    def run(x, w):
        out = torch.ops.aten.convolution(x, w, None, *args)
        grads = torch.ops.aten.convolution_backward(out, x, w, [channels], *args, [True, True, False])
        return [out.stride(), grads[0].stride(), grads[1].stride()], out

    cpu_strides, cpu_out = run(x, w)
    xe, we = x.emu(), w.emu()
    emu_strides, emu_out = run(xe, we)
    mode = FakeTensorMode()
    fx, fw = mode.from_tensor(xe), mode.from_tensor(we)
    with mode:
        fake_strides, _ = run(fx, fw)
    assert emu_strides == cpu_strides
    assert fake_strides == cpu_strides
    if channels_last is not None and formats != ("contiguous", "contiguous"):
        assert emu_out.is_contiguous(memory_format=channels_last)
    torch.testing.assert_close(emu_out.cpu(), cpu_out)
    del xe, we, emu_out


def test_fake_convolutions_of_other_devices_are_pytorchs(baseline_memory):
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    with FakeTensorMode() as mode:
        out = torch.nn.functional.conv2d(mode.from_tensor(x), mode.from_tensor(torch.randn(4, 3, 3, 3)))
    assert out.device.type == "cpu" and out.stride() == torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3)).stride()
    assert fake_impls.op_implementations_dict[torch.ops.aten.convolution.default].__wrapped__ is not None
# LITERALINCLUDE END: TEST_CONVOLUTION_FORMAT


def test_conjugate_and_negative_views_copy_without_recursion():
    y = torch.randn(3, dtype=torch.cfloat)
    e = emu(y)
    assert torch.equal(e.conj().clone().cpu(), y.conj().clone())
    assert torch.equal(e.conj().resolve_conj().cpu(), y.conj().resolve_conj())
    assert torch.equal(torch.fft.ifft(e).cpu(), torch.fft.ifft(y))
    other = torch.empty(3, dtype=torch.cfloat, device="emu:1")
    other.copy_(e.conj())  # peer copy of a conjugate view
    assert torch.equal(other.cpu(), y.conj())
    x = torch.randn(4)
    assert torch.equal(emu(x).neg().resolve_neg().cpu(), -x)


def test_zero_tensors_stay_zero_tensors():
    z = torch._efficientzerotensor(3, device="emu")
    assert z._is_zerotensor() and z.device.type == "emu"
    assert z.cpu().tolist() == [0.0, 0.0, 0.0]
    x = torch.randn(4, requires_grad=True)
    xe = emu(x.detach()).requires_grad_()
    torch.sgn(x).sum().backward()
    torch.sgn(xe).sum().backward()  # sgn's backward for real input is a ZeroTensor
    assert torch.equal(xe.grad.cpu(), x.grad)


# LITERALINCLUDE START: TEST_DETERMINISTIC_FILL
@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("dtype", [torch.float, torch.bfloat16, torch.cfloat, torch.int, torch.uint8, torch.bool])
def test_deterministic_mode_fills_new_memory_like_cpu(deterministic, dtype):
    def made(device):
        out = torch.empty(2, dtype=dtype, device=device)
        torch.empty(3, dtype=dtype, out=out)
        grown = torch.zeros(2, dtype=dtype, device=device).resize_(5)
        return [torch.empty(3, dtype=dtype, device=device),
                torch.empty_like(torch.zeros(2, 2, dtype=dtype, device=device)),
                torch.empty_strided((2, 2), (1, 2), dtype=dtype, device=device),
                torch.empty_permuted((2, 3), (1, 0), dtype=dtype, device=device),
                out, grown]

    for emu_t, cpu_t in zip(made("emu"), made("cpu")):
        torch.testing.assert_close(emu_t.cpu(), cpu_t, equal_nan=True, rtol=0, atol=0)
    assert made("cpu")[-1][:2].eq(0).all()  # resize_ keeps what was there


def test_fill_uninitialized_memory_off_leaves_memory_as_it_is(deterministic):
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        x = torch.zeros(4, device="emu")
        del x
        assert torch.empty(4, device="emu").eq(0).all()  # the cached block, not NaN
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = True
# LITERALINCLUDE END: TEST_DETERMINISTIC_FILL


def test_set_without_source_stays_on_the_tensors_device():
    # set_() runs without the dispatcher's device guard (PyTorch's test_device_guard).
    assert torch.emu.current_device() == 0
    t = torch.randn(2, device="emu:1")
    t.set_()
    assert t.device == torch.device("emu:1") and t.untyped_storage().device == torch.device("emu:1")
    assert t.numel() == 0
