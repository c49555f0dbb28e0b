"""The native emu kernels of the common ops (csrc/aten/kernels/): each matches
CPU, runs without the fallback, keeps PyTorch's type promotion and device
rules, respects strict memory mode, and a model also trains with only the
minimal operator set plus the fallback (TORCH_EMU_NATIVE_KERNELS=0)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import native_runtime_only, run_python
from _after_import import run_after_import

import torch_emu
from torch_emu.tools import fallback_report


def inputs(*shapes, dtype=torch.float32, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for shape in shapes:
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=g).to(dtype)
            out.append(t.abs() + 0.1 if positive else t)
        else:
            out.append(torch.randint(-5, 6, shape, generator=g, dtype=dtype))
    return out


def on_emu(args):
    return [a.to("emu") if isinstance(a, torch.Tensor) else a for a in args]


def check(fn, args, atol=None, rtol=None, native=True):
    """fn on emu equals fn on CPU; with native=True no op takes the fallback."""
    expected = fn(*args)
    with fallback_report() as report:
        actual = fn(*on_emu(args))
    if native:
        assert report.ops == [], f"went through the fallback: {report.ops}"
    flat_e = expected if isinstance(expected, (tuple, list)) else [expected]
    flat_a = actual if isinstance(actual, (tuple, list)) else [actual]
    for e, a in zip(flat_e, flat_a):
        assert a.device.type == "emu"
        torch.testing.assert_close(a.cpu(), e, atol=atol, rtol=rtol)


A, B = (4, 5), (4, 5)
POINTWISE = {
    "add": (lambda a, b: a + b, (A, B)),
    "add alpha": (lambda a, b: torch.add(a, b, alpha=-2), (A, B)),
    "sub": (lambda a, b: a - b, (A, B)),
    "mul": (lambda a, b: a * b, (A, B)),
    "div": (lambda a, b: a / b, (A, B)),
    "div floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), (A, B)),
    "maximum": (torch.maximum, (A, B)),
    "minimum": (torch.minimum, (A, B)),
    "eq": (torch.eq, (A, B)),
    "lt": (torch.lt, (A, B)),
    "ge": (torch.ge, (A, B)),
    "gt scalar": (lambda a: a > 0, (A,)),
    "ne scalar": (lambda a: a != 1, (A,)),
    "where": (lambda a, b: torch.where(a > 0, a, b), (A, B)),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), (A,)),
    "clamp_min": (lambda a: a.clamp_min(0.1), (A,)),
    "relu": (torch.relu, (A,)),
    "neg": (torch.neg, (A,)),
    "broadcast": (lambda a, b: a + b[0], (A, B)),
    "non-contiguous": (lambda a, b: a.t() * b.t(), (A, B)),
    "scalar mul": (lambda a: a * 3, (A,)),
    "tril": (lambda a: torch.tril(a, -1), (A,)),
    "triu": (lambda a: a.t().triu(1), (A,)),
    "isneginf": (lambda a: torch.isneginf(a / 0), (A,)),
    "isposinf": (lambda a: torch.isposinf(a / 0), (A,)),
}
FLOATING = {
    "pow scalar": (lambda a: a.pow(2.5), (A,), True),
    "pow tensor": (torch.pow, (A, B), True),
    "sqrt": (torch.sqrt, (A,), True),
    "rsqrt": (torch.rsqrt, (A,), True),
    "exp": (torch.exp, (A,), False),
    "log": (torch.log, (A,), True),
    "reciprocal": (torch.reciprocal, (A,), True),
    "sigmoid": (torch.sigmoid, (A,), False),
    "tanh": (torch.tanh, (A,), False),
    "cos": (torch.cos, (A,), False),
    "sin": (lambda a: a.clone().sin_(), (A,), False),
    "silu": (F.silu, (A,), False),
    "gelu": (F.gelu, (A,), False),
    "gelu tanh": (lambda a: F.gelu(a, approximate="tanh"), (A,), False),
    "addcmul": (lambda a, b: torch.addcmul(a, a, b, value=0.5), (A, B), False),
    "addcdiv": (lambda a, b: torch.addcdiv(a, a, b, value=-0.5), (A, B), True),
    "lerp scalar": (lambda a, b: torch.lerp(a, b, 0.3), (A, B), False),
    "lerp tensor": (lambda a, b: torch.lerp(a, b, torch.sigmoid(a)), (A, B), False),
    "sum": (torch.sum, (A,), False),
    "sum dim keepdim": (lambda a: a.sum(1, keepdim=True), (A,), False),
    "amax": (lambda a: a.amax(0), (A,), False),
    "argmax": (lambda a: a.argmax(1), (A,), False),
    "all": (lambda a: (a > -10).all(), (A,), False),
    "mm": (torch.mm, ((4, 5), (5, 3)), False),
    "bmm": (torch.bmm, ((2, 4, 5), (2, 5, 3)), False),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), ((4, 3), (4, 5), (5, 3)), False),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b), ((2, 4, 3), (2, 4, 5), (2, 5, 3)), False),
    "linear": (F.linear, ((4, 5), (3, 5), (3,)), False),
    "softmax": (lambda a: torch.softmax(a, -1), (A,), False),
    "log_softmax": (lambda a: torch.log_softmax(a, 0), (A,), False),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (5,), w, b), (A, (5,), (5,)), False),
    "cat": (lambda a, b: torch.cat([a, b], 1), (A, B), False),
    "stack": (lambda a, b: torch.stack([a, b]), (A, B), False),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("name", list(POINTWISE))
def test_pointwise(name, dtype):
    fn, shapes = POINTWISE[name]
    args = inputs(*shapes, dtype=dtype)
    if name.startswith("div"):  # no integer division by zero
        args[1] = torch.where(args[1] == 0, torch.ones_like(args[1]), args[1])
    check(fn, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(FLOATING))
def test_floating(name, dtype):
    fn, shapes, positive = FLOATING[name]
    tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    check(fn, inputs(*shapes, dtype=dtype, positive=positive), **tol)


def test_in_place_forms():
    def body(a, b):
        a = a.clone()
        a.add_(b, alpha=2).mul_(b).sub_(1).div_(b.abs() + 1).clamp_(-3, 3).sigmoid_().lerp_(b, 0.5)
        a.addcmul_(b, b, value=0.1).addcdiv_(b, b.abs() + 1).pow_(2).sqrt_().relu_()
        a.gt_(0.5)
        return a
    check(body, inputs(A, B))

    def zero_and_scatter(a, b):
        z = a.clone().zero_()
        s = a.clone().t().zero_()  # not dense in memory order: zero_ through fill_
        idx = torch.tensor([[0, 1, 2, 3, 0]], device=a.device)
        a = a.clone().scatter_(0, idx, b[:1]).scatter_add_(0, idx, b[:1])
        return z, s, a
    check(zero_and_scatter, inputs(A, B))


def test_type_promotion_and_python_numbers():
    f, i, h = inputs(A)[0], inputs(A, dtype=torch.int64)[0], inputs(A, dtype=torch.float16)[0]
    cases = [
        lambda f, i, h: i * 2.5,           # int tensor, float number: float result
        lambda f, i, h: i + f,             # int + float tensors
        lambda f, i, h: h + f,             # half + float
        lambda f, i, h: i / 2,             # true division of integers
        lambda f, i, h: torch.sqrt(i.abs()),  # integer input, float output
        lambda f, i, h: f * (1 + 2j),      # complex number
        lambda f, i, h: (f > 0) + (f < 0),  # bool + bool
        lambda f, i, h: h.clone().add_(f),  # in place: half self, float other
        lambda f, i, h: f + torch.tensor(2.0, dtype=torch.float64),  # 0-dim CPU tensor
    ]
    for fn in cases:
        check(fn, [f, i, h], native=False)


def test_python_numbers_convert_without_overflow_checks_like_cpu():
    # CPU's kernels read a scalar operand with a plain conversion (uint8 + 1000 wraps, float * 1e300 is
    # inf), a 16-bit float kernel as a float (0 * 1e10 is 0 in half, not 0 * inf).
    u = torch.tensor([0, 1, 255], dtype=torch.uint8)
    for fn in (lambda u: u + 1000, lambda u: u * 300, lambda u: u - 5, lambda u: u.clone().add_(200),
               lambda u: u.to(torch.int8) + 200, lambda u: u.float() * 1e300, lambda u: u.half() * 1e10,
               lambda u: u.to(torch.uint16) * 300):
        torch.testing.assert_close(fn(u.to("emu")).cpu(), fn(u), rtol=0, atol=0, equal_nan=True)


@pytest.mark.launch_mode
def test_errors_are_clear():
    a, b = on_emu(inputs(A, B))
    with pytest.raises(RuntimeError, match="same device, but found at least two devices, emu:0 and cpu"):
        a + torch.ones(4, 5)
    with pytest.raises(RuntimeError, match="emu:0 and emu:1"):
        torch.mm(a, b.t().to("emu:1"))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        a.long().add_(1.5)
    with pytest.raises(RuntimeError):  # the shape error CPU's kernel raises
        torch.mm(a, b)
    with pytest.raises(RuntimeError, match="Bad in-place call|doesn't match the broadcast shape"):
        a[:1].add_(b)
    # The kernel finds an index out of range when it reads the indices: at the
    # call if it runs then, at the next synchronisation if it was queued (as
    # CUDA reports a device-side assert).
    bad = torch.tensor([7], device="emu")
    if torch_emu._C._launch_mode() == "queued":
        a.index_select(0, bad)
        with pytest.raises(torch.AcceleratorError, match="index out of range"):
            torch.emu.synchronize()
    else:
        with pytest.raises(IndexError, match="index out of range"):
            a.index_select(0, bad)
    # The same for x[i] (CPU's message).
    if torch_emu._C._launch_mode() == "queued":
        a[bad]
        with pytest.raises(torch.AcceleratorError, match="index 7 is out of bounds for dimension 0 with size 4"):
            torch.emu.synchronize()
    else:
        with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 4"):
            a[bad]


def test_autograd_through_native_kernels():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 8)
    attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    norm = torch.nn.LayerNorm(8)
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.BatchNorm2d(2),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2))
    tokens, image = torch.randint(0, 10, (3, 6)), torch.randn(2, 1, 6, 6)
    target = torch.randint(0, 8, (3,))

    def loss_and_grads(device):
        mods = [m.to(device) for m in (emb, attn, norm, conv)]
        for m in mods:
            m.zero_grad(set_to_none=True)
        h = norm(emb(tokens.to(device)))
        h = attn(h, h, h, need_weights=False)[0] + F.gelu(h)
        logits = torch.tanh(h.mean(1)) * torch.sigmoid(h.amax(1)) + F.silu(h.sum(1))
        loss = F.cross_entropy(logits, target.to(device))
        loss = loss + F.mse_loss(conv(image.to(device)), torch.zeros(2, 2, 3, 3, device=device))
        loss.backward()
        # copies: on CPU, .cpu() is the grad itself, which the next .to("emu") moves in place
        grads = [p.grad.to("cpu", copy=True) for m in mods for p in m.parameters()]
        return loss.detach().cpu(), grads

    cpu_loss, cpu_grads = loss_and_grads("cpu")
    emu_loss, emu_grads = loss_and_grads("emu")
    torch.testing.assert_close(emu_loss, cpu_loss)
    for e, c in zip(emu_grads, cpu_grads):
        torch.testing.assert_close(e, c, atol=1e-5, rtol=1e-4)


def test_indexing():
    x = inputs((6, 4))[0]
    idx = torch.tensor([4, 0, 4, 2])
    check(lambda x, i: x.index_select(0, i), [x, idx])
    check(lambda x, i: x.gather(1, i[:, None].expand(4, 3) % 4), [x[:4], idx], native=False)  # % 4: fallback
    check(lambda x, i: F.embedding(i, x), [x, idx])
    check(lambda x, m: x.clone().masked_fill_(m, -1.0), [x, x > 0])
    check(lambda x, i: torch.zeros(6, 4, device=x.device).scatter_add(0, i[:, None].expand(4, 4), x[:4]), [x, idx])
    check(lambda a, b: torch.cat([a, b.double()]), [x, x], native=False)  # mixed dtypes: CPU's rules


# LITERALINCLUDE START: TEST_GATHER_EXPANDED_INDEX
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64])
def test_gather_along_an_expanded_index_matches_cpu(dtype, baseline_memory):
    """gather_on_emu (EmuCpuStubs.cpp): the row kernel CPU uses for an
    expanded index along dim 0, and the general one otherwise (half, integer,
    another dim, a non-contiguous source, an index with a stride above 1)."""
    x = inputs((40, 3, 5), dtype=dtype)[0]
    rows = torch.tensor([7, 0, 39, 7, 12, 3])
    pairs = torch.stack([rows, rows.flip(0)], 1)  # (6, 2), strides (2, 1)
    columns = rows % 3
    cases = [
        lambda x, r, p, c: x.gather(0, r[:, None, None].expand(6, 3, 5)),  # strides (1, 0, 0): rows
        lambda x, r, p, c: x.gather(0, r[:, None, None].expand(6, 3, 5)[:4]),  # fewer rows
        lambda x, r, p, c: x.gather(0, r[:, None, None].expand(6, 2, 5)),  # index narrower than x on dim 1
        lambda x, r, p, c: x.transpose(1, 2).gather(0, r[:, None, None].expand(6, 5, 3)),  # non-contiguous x
        lambda x, r, p, c: x.gather(0, p[:, :, None].expand(6, 2, 5)),  # an index stride of 2
        lambda x, r, p, c: x.gather(1, c[:, None, None].expand(6, 3, 5)),  # along dim 1
        lambda x, r, p, c: x.gather(0, r[:0, None, None].expand(0, 3, 5)),  # empty
    ]
    for case in cases:
        check(case, [x, rows, pairs, columns])
    with pytest.raises(RuntimeError, match="index 40 is out of bounds for dimension 0 with size 40"):
        x.to("emu").gather(0, torch.tensor([1, 40], device="emu")[:, None, None].expand(2, 3, 5)).cpu()
# LITERALINCLUDE END: TEST_GATHER_EXPANDED_INDEX


# LITERALINCLUDE START: TEST_INTEGER_INDEX
@pytest.mark.launch_mode
def test_integer_indexing_is_a_native_kernel(baseline_memory):
    """x[i] with integer indices needs no data for its result's shape: a
    native kernel that is queued like any other, never waited for."""
    blocking = torch_emu._C._launch_mode() == "blocking"
    x = torch.arange(5 * 6 * 7, dtype=torch.float32).view(5, 6, 7)
    i, j = torch.tensor([4, 0, -1]), torch.tensor([[1, 2], [3, 5]])
    cases = [
        lambda x, d: x[i.to(d)],
        lambda x, d: x[i],  # host indices, as on CUDA
        lambda x, d: x[i.int().to(d)],  # int32
        lambda x, d: x[:, j.to(d)],
        lambda x, d: x[i.to(d), :, i.to(d)],  # apart: the indexed dimension goes first
        lambda x, d: x[j.to(d)[:, :1], i[:2].to(d)],  # broadcast
        lambda x, d: x.transpose(0, 2)[i[:2].to(d)],  # strided self
        lambda x, d: x[..., torch.tensor([], dtype=torch.long, device=d)],
        lambda x, d: x.long()[i.to(d)],
        lambda x, d: (x > 100)[i.to(d)],
        lambda x, d: x.to(torch.bfloat16)[i.to(d)],
    ]
    for case in cases:
        expected = case(x, "cpu")
        before = torch_emu._C._launch_counts()
        with fallback_report() as report:
            actual = case(x.to("emu"), "emu")
        waited = torch_emu._C._launch_counts()[2] - before[2]
        assert report.ops == [] and (waited == 0 or blocking)
        assert actual.device.type == "emu" and torch.equal(actual.cpu(), expected)
    # What the host can check raises at the call, with CPU's error.
    e = x.to("emu")
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        e[torch.tensor([0.5], device="emu")]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 3"):
        e[(i.to("emu"),) * 4]
    with pytest.raises(IndexError, match="shape mismatch"):
        e[i.to("emu"), j.to("emu")]
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same device as the indexed "
                                           r"tensor \(emu:0\)"):
        e[i.to("emu:1")]  # CUDA's error for another device's indices
    # A boolean mask still needs the fallback (nonzero): it waits.
    assert torch.equal(e[e > 200].cpu(), x[x > 200])
# LITERALINCLUDE END: TEST_INTEGER_INDEX


def test_random_fills_match_cpu_for_a_seed():
    for fill in (lambda t, g: t.normal_(1.0, 2.0, generator=g), lambda t, g: t.uniform_(-1, 1, generator=g),
                 lambda t, g: t.bernoulli_(0.3, generator=g), lambda t, g: t.random_(0, 100, generator=g)):
        cpu = fill(torch.empty(64), torch.Generator().manual_seed(7))
        with fallback_report() as report:
            emu = fill(torch.empty(64, device="emu"), torch.Generator("emu").manual_seed(7))
        assert report.ops == []
        assert torch.equal(emu.cpu(), cpu)
    torch.manual_seed(3)
    cpu_drop = F.dropout(torch.ones(100), 0.5)
    torch.manual_seed(3)
    emu_drop = F.dropout(torch.ones(100, device="emu"), 0.5)
    assert torch.equal(emu_drop.cpu(), cpu_drop)


@pytest.mark.launch_mode
def test_arange_is_queued_with_cpus_checks(baseline_memory):
    blocking = torch_emu._C._launch_mode() == "blocking"
    for args, kw in [((10,), {}), ((3, 11, 2), {}), ((0, 1, 0.1), {}), ((5,), {"dtype": torch.bfloat16}),
                     ((-3.5, 2, 0.5), {"dtype": torch.float64}), ((4, 0, -1), {}), ((0,), {})]:
        before = torch_emu._C._launch_counts()
        with fallback_report() as report:
            actual = torch.arange(*args, device="emu:1", **kw)
        assert report.ops == [] and (blocking or torch_emu._C._launch_counts()[2] == before[2])
        expected = torch.arange(*args, **kw)
        assert actual.device == torch.device("emu:1") and actual.dtype == expected.dtype
        assert torch.equal(actual.cpu(), expected)
    out = torch.empty(10, device="emu")[::2]  # not contiguous, the right length
    assert torch.equal(torch.arange(5, out=out).cpu(), torch.arange(5.0))
    x = torch.zeros(2, 3, device="emu")  # a 2-d view of the right length keeps its shape
    torch.arange(0, 4, out=x.narrow(1, 1, 2))
    assert torch.equal(x.cpu(), torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 3.0]]))
    line = torch.zeros(1, 49, device="emu")  # rounding gives 50 elements: CPU's warning, then resized
    with pytest.warns(UserWarning, match="The out tensor will be resized"):
        torch.arange(-1, 1, 2.0 / 49, out=line)
    assert line.shape == (50,) and torch.equal(line.cpu(), torch.arange(-1, 1, 2.0 / 49))
    for args, message in [((0, 1, 0), "step must be nonzero"), ((0, float("inf")), "unsupported range"),
                          ((5, 0, 1), "upper bound and lower bound inconsistent with step sign")]:
        with pytest.raises(RuntimeError, match=message):
            torch.arange(*args, device="emu")
    with pytest.raises(RuntimeError, match="\"arange_cpu\" not implemented for 'Bool'"):
        torch.arange(3, out=torch.empty(0, dtype=torch.bool, device="emu"))


@pytest.mark.parametrize("device", ["emu", "emu:1"])
def test_dropout_and_its_backward_are_queued_ops_drawing_cpus_numbers(device, baseline_memory):
    x = torch.randn(32, 16, requires_grad=True)
    xe = x.detach().to(device).requires_grad_()
    torch.manual_seed(5)
    y = F.dropout(x, 0.3)
    y.sum().backward()
    torch.manual_seed(5)
    with fallback_report() as report:
        ye = F.dropout(xe, 0.3)
        ye.sum().backward()
    assert report.ops == [] and ye.device == xe.grad.device == xe.device
    assert torch.equal(ye.cpu(), y) and torch.equal(xe.grad.cpu(), x.grad)
    out, mask = torch.native_dropout(xe.detach(), 0.5, False)  # not training: the input, all kept
    assert torch.equal(out.cpu(), x.detach()) and mask.all().item()


def test_foreach_ops():
    def adam_like(ps, gs):
        ps, gs = [p.clone() for p in ps], list(gs)
        torch._foreach_mul_(ps, 0.9)
        torch._foreach_add_(ps, gs, alpha=0.1)
        torch._foreach_lerp_(ps, gs, 0.2)
        torch._foreach_addcmul_(ps, gs, gs, value=0.5)
        sq = torch._foreach_sqrt([p.abs() for p in ps])
        torch._foreach_div_(sq, [2.0, 3.0, 4.0])
        torch._foreach_addcdiv_(ps, gs, sq, [0.1, 0.2, 0.3])
        return ps + list(torch._foreach_norm(ps))
    shapes = [(3,), (4, 5), (2, 2, 2)]
    ps, gs = inputs(*shapes), inputs(*shapes, seed=1)
    expected = adam_like(ps, gs)
    with fallback_report() as report:
        actual = adam_like([p.emu() for p in ps], [g.emu() for g in gs])
    assert [op for op in report.ops if "foreach" in op] == []
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e)


def test_training_steps_run_native_and_leak_nothing(baseline_memory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    losses = {}
    for device in ("cpu", "emu"):
        net = copy.deepcopy(model).to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)  # foreach on emu
        with fallback_report() as report:
            for _ in range(3):
                loss = F.cross_entropy(net(x.to(device)), y.to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        losses[device] = loss.item()
        if device == "emu":
            assert report.ops == [], report.ops  # forward, backward and Adam all native
        del net, opt, loss
    assert losses["emu"] == pytest.approx(losses["cpu"], rel=1e-5)


@pytest.mark.launch_mode
def test_kernels_follow_the_current_stream():
    s = torch.emu.Stream()
    a = torch.ones(256, 256, device="emu")
    s.wait_stream(torch.emu.current_stream())  # a is the current stream's result
    with torch.emu.stream(s):
        b = a @ a + 1
        c = torch.softmax(b, -1).sum()
    s.synchronize()
    torch.testing.assert_close(c.cpu(), torch.tensor(256.0))


STRICT_CODE = """
    import torch, torch_emu, torch.nn.functional as F
    assert torch_emu._C._strict_mode()
    x = torch.randn(8, 8)
    for dev in ("cpu", "emu"):
        t = x.to(dev)
        t2 = (t @ t.t() + 1).relu_()
        out = [F.layer_norm(t2, (8,)), torch.softmax(t2, -1), torch.cat([t, t2]), t2.sum(0),
               t.clone().zero_(), F.embedding(torch.tensor([1, 2]).to(dev), t)]
        ps = [t.clone(), t2.clone()]
        torch._foreach_add_(ps, [t, t], alpha=2)
        res = [o.cpu() for o in out + ps]
        if dev == "cpu":
            ref = res
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ref, res))
    print("ok")
"""


@native_runtime_only
def test_strict_mode():
    result = run_after_import(STRICT_CODE, TORCH_EMU_STRICT="1")
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


MINIMAL_CODE = """
    import copy, torch, torch_emu, torch.nn.functional as F
    from torch.profiler import profile, ProfilerActivity
    from torch_emu.tools import fallback_report
    assert not torch_emu._C._native_kernels()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    losses = {}
    for device in ("cpu", "emu"):
        net = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        with profile(activities=[ProfilerActivity.CPU]) as prof, fallback_report() as report:
            for _ in range(3):
                loss = F.cross_entropy(net(x.to(device)), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
        losses[device] = loss.item()
    ran = {e.key for e in prof.key_averages() if e.key.startswith("aten::")}
    fell_back = {op.split(".")[0] for op in report.ops}
    routed = {op.split(".")[0] for op in torch_emu._C._fallback_routed_ops()}
    registered = {op.split(".")[0] for op in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")}
    native = (ran & (registered - routed)) - fell_back
    print("LOSSES", losses["cpu"], losses["emu"])
    print("NATIVE", sorted(native))
    print("FALLBACK", len(fell_back))
"""

# The minimal operator set (docs/guide/operators.md) plus the kernels other
# chapters register always: fill_ (the DispatchStub example) and clone (keeps
# the BackendMeta format tag, see the serialization chapter).
MINIMAL = {"aten::empty", "aten::empty_strided", "aten::as_strided", "aten::resize_", "aten::_reshape_alias",
           "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_local_scalar_dense", "aten::set_",
           "aten::view", "aten::fill_", "aten::clone"}


def test_minimal_set_plus_fallback_trains_a_model():
    result = run_python(MINIMAL_CODE, TORCH_EMU_NATIVE_KERNELS="0")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in result.stdout.splitlines() if " " in line}
    cpu_loss, emu_loss = map(float, lines["LOSSES"].split())
    assert emu_loss == pytest.approx(cpu_loss, rel=1e-6)
    native = set(eval(lines["NATIVE"]))
    assert native <= MINIMAL, native - MINIMAL
    assert int(lines["FALLBACK"]) > 5  # the model's ops really went through the fallback


def test_every_registration_names_a_real_operator():
    # m.impl() of a misspelt overload ("pow_.Tensor_Scalar") registers a
    # kernel nobody calls instead of failing: check every emu registration.
    for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"):
        if not name.startswith("aten::"):
            continue
        op, _, overload = name.partition(".")
        assert torch._C._dispatch_find_schema_or_throw(op, overload) is not None, name


def test_native_kernels_are_on_by_default():
    assert torch_emu._C._native_kernels()
    for op in ("aten::add.Tensor", "aten::mm", "aten::_softmax", "aten::native_layer_norm",
               "aten::_foreach_add_.List", "aten::normal_", "aten::cat"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_batched_matmul_keeps_onednn_on(dtype, baseline_memory):
    """bmm/baddbmm in bfloat16/float16 take CPU's oneDNN path on host aliases:
    CPU's results bit for bit, and oneDNN stays enabled for the process (a
    failed oneDNN call on emu tensors used to turn it off everywhere)."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(3, 16, 24, generator=g).to(dtype) for _ in range(3))
    b = b.transpose(1, 2)
    assert torch._C._get_mkldnn_enabled()
    for f in (lambda a, b, c: torch.bmm(a, b), lambda a, b, c: torch.baddbmm(c[:, :, :16], a, b, beta=0.5),
              lambda a, b, c: c[:, :, :16].clone().baddbmm_(a, b), lambda a, b, c: a @ b):
        got = f(a.to("emu"), b.to("emu"), c.to("emu"))
        assert got.device.type == "emu"
        torch.testing.assert_close(got.cpu(), f(a, b, c), rtol=0, atol=0)
    assert torch._C._get_mkldnn_enabled()
    del got


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_sum_of_a_strided_input_rounds_like_cpu(dtype):
    """CPU's sum accumulates such an input in a float buffer, on CPU tensors only
    (found by PyTorch's test_reductions.py): emu's sum runs on host aliases in
    these dtypes and gives CPU's result bit for bit."""
    g = torch.Generator().manual_seed(1234)
    base = torch.rand(2, 3, generator=g).mul(2).sub(1).to(dtype)
    for expand in (lambda t: t.unsqueeze(1).expand(-1, 5, -1), lambda t: t.t().unsqueeze(0).expand(7, -1, -1)):
        for dims in ([], [0, 1, 2], [0, 2]):
            torch.testing.assert_close(expand(base.to("emu")).sum(dims).cpu(), expand(base).sum(dims), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                                   torch.int64, torch.int32, torch.uint8, torch.bool])
def test_one_element_fill_inside_a_kernel_matches_cpu(dtype):
    """A reduction's CPU code sets its output with fill_ before accumulating
    into it; inside a kernel a one-element fill_ is a store (EmuElementwiseKernels.cpp),
    which must give CPU's results in every dtype, for full and per-dim reductions."""
    a = (torch.rand(8, 8, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    for reduce in (lambda t: t.sum(), lambda t: t.sum(1), lambda t: t.sum((0, 1), keepdim=True)):
        torch.testing.assert_close(reduce(a.to("emu")).cpu(), reduce(a), rtol=0, atol=0)


@pytest.mark.launch_mode
def test_one_element_fill_outside_kernels_keeps_cpu_errors(baseline_memory):
    # Outside kernels fill_ is PyTorch's own, launched in stream order; the value is
    # converted on the host first, so an overflow raises CPU's error at the call in
    # every launch mode (CUDA converts it before its launch too).
    for shape in ((), (1,), (3,)):
        t = torch.zeros(shape, dtype=torch.uint8, device="emu")
        with pytest.raises(RuntimeError, match="cannot be converted to type uint8_t without overflow"):
            t.fill_(300)
        assert t.fill_(7).cpu().tolist() == torch.full(shape, 7, dtype=torch.uint8).tolist()
    del t


@pytest.mark.launch_mode
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_pow_in_complex_half_as_cuda(baseline_memory):
    # CUDA has pow in ComplexHalf, computed in complex64 and rounded; CPU's kernels have none.
    torch.manual_seed(0)
    h = torch.randn(6, 5, dtype=torch.half)
    c = torch.randn(6, 5, dtype=torch.cfloat).to(torch.chalf)

    def expected(base, exponent):
        widen = lambda x: x.to(torch.cfloat) if isinstance(x, torch.Tensor) else x
        return torch.pow(widen(base), widen(exponent)).to(torch.chalf)

    emu = lambda x: x.to("emu") if isinstance(x, torch.Tensor) else x
    for base, exponent in [(0.5j, h), (1 + 0j, h), (2.2 - 1.6j, h.t()), (h, 1j), (c, 2), (c, 0.5 + 1j), (c, c),
                           (c, h), (h, c[0]), (torch.tensor(1.5j), h), (c, torch.tensor(2.0))]:
        got = torch.pow(emu(base), emu(exponent))
        assert got.dtype == torch.chalf and got.device.type == "emu"
        torch.testing.assert_close(got.cpu(), expected(base, exponent), equal_nan=True)
        out = torch.empty(0, dtype=torch.cfloat, device="emu")  # out= in a wider dtype: rounded first
        torch.pow(emu(base), emu(exponent), out=out)
        torch.testing.assert_close(out.cpu(), expected(base, exponent).to(torch.cfloat), equal_nan=True)
    in_place = c.to("emu")
    in_place.pow_(2).pow_(c.to("emu"))
    torch.testing.assert_close(in_place.cpu(), expected(expected(c, 2), c), equal_nan=True)
    # What CUDA refuses at the call, with CPU's words.
    with pytest.raises(RuntimeError, match="result type ComplexHalf can't be cast to the desired output type Half"):
        h.to("emu").pow_(1j)
    with pytest.raises(RuntimeError, match="result type ComplexHalf can't be cast to the desired output type Half"):
        torch.pow(0.5j, h.to("emu"), out=torch.empty(0, dtype=torch.half, device="emu"))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        c[0].to("emu").pow_(c.to("emu"))
    with pytest.raises(RuntimeError, match="unsupported operation"):
        e = c.to("emu")
        torch.pow(e[1:], 2, out=e[:-1])
    with pytest.raises(RuntimeError, match="Expected out tensor to have device"):
        torch.pow(c.to("emu"), 2, out=torch.empty(0, dtype=torch.chalf))
    torch.emu.synchronize()


@pytest.mark.launch_mode
def test_matrix_products_with_out_are_queued_native_kernels(baseline_memory):
    """mm/bmm/addmm/baddbmm(out=...), the form Inductor's generated code calls:
    CPU's results, resizing and errors at the call, and the kernel waits for
    nothing (it writes into a tensor that exists)."""
    blocking = torch_emu._C._launch_mode() == "blocking"
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(6, 6, generator=g) for _ in range(3))
    a3, b3 = torch.randn(2, 6, 6, generator=g), torch.randn(2, 6, 6, generator=g)
    cases = {
        "mm": lambda d, out: torch.mm(a.to(d), b.to(d), out=out),
        "bmm": lambda d, out: torch.bmm(a3.to(d), b3.to(d), out=out),
        "addmm": lambda d, out: torch.addmm(c.to(d), a.to(d), b.to(d), beta=0.5, alpha=2, out=out),
        "baddbmm": lambda d, out: torch.baddbmm(a3.to(d), a3.to(d), b3.to(d), alpha=0.5, out=out),
    }
    for name, case in cases.items():
        shape = (2, 6, 6) if "bmm" in name else (6, 6)
        for make_out in (lambda d: torch.empty(shape, device=d),  # as it is
                         lambda d: torch.empty(shape[::-1], device=d).mT,  # other strides: a proxy, copied back
                         lambda d: torch.empty(0, device=d)):  # resized
            expected = case("cpu", make_out("cpu"))
            out = make_out("emu")
            before = torch_emu._C._launch_counts()
            with fallback_report() as report:
                result = case("emu", out)
            waited = torch_emu._C._launch_counts()[2] - before[2]
            assert report.ops == [] and (waited == 0 or blocking), name
            assert result is out and out.shape == expected.shape and out.stride() == expected.stride(), name
            torch.testing.assert_close(out.cpu(), expected, msg=name)
    # out aliasing self, as CPU computes it.
    x = torch.randn(6, 6, generator=g)
    xe = x.to("emu")
    torch.addmm(xe, xe, xe, out=xe)
    torch.testing.assert_close(xe.cpu(), torch.addmm(x, x, x, out=x))
    # What the host can check raises at the call, with CPU's error.
    for d in ("cpu", "emu"):
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got double instead"):
            torch.mm(a.to(d), b.to(d), out=torch.empty(6, 6, dtype=torch.float64, device=d))
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            torch.mm(a.to(d), b[:4].to(d), out=torch.empty(6, 6, device=d))
        with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
            torch.mm(a.to(d), b.to(d), out=torch.empty(3, 3, device=d))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(a.to("emu"), b.to("emu"), out=torch.empty(6, 6, device="emu:1"))
