"""Mixed precision on emu: autocast policies (AutocastPrivateUse1, mirroring
CUDA), the torch.emu.amp module functions, GradScaler's native emu kernels and
mixed-precision training."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from _after_import import run_after_import

LOW = [torch.float16, torch.bfloat16]


def emu_and_cpu(*tensors):
    """The same values on emu and on CPU."""
    return [t.to("emu") for t in tensors], list(tensors)


# --------------------------------------------------------------------------
# Registration: the policies and kernels exist, and match CUDA's.
# --------------------------------------------------------------------------


def test_policies_mirror_cuda():
    """Every op with an AutocastCUDA kernel has an AutocastPrivateUse1 one and
    vice versa, except CUDA's cuDNN-only convolutions and emu's whole-sequence
    LSTM op (CUDA casts its cuDNN RNN op instead, see EmuRecurrent.cpp)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = torch._C._dispatch_get_all_op_names()
    cuda = {n for n in names if has(n, "AutocastCUDA")}
    emu = {n for n in names if has(n, "AutocastPrivateUse1")}
    cuda_only = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
    emu_only = {"aten::lstm.input"}
    assert len(emu) > 100
    assert emu - emu_only == cuda - cuda_only
    assert emu_only <= emu


def test_amp_kernels_are_native():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert has("aten::_amp_foreach_non_finite_check_and_unscale_", "PrivateUse1")
    assert has("aten::_amp_update_scale_", "PrivateUse1")
    # Registered with the switchable native kernels (TORCH_EMU_NATIVE_KERNELS=0 leaves them out).
    dump = torch._C._dispatch_dump("aten::_amp_update_scale_")
    assert "EmuNativeKernels.cpp" in dump


def test_module_functions():
    assert torch.amp.is_autocast_available("emu")
    assert torch.emu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.emu.amp.get_amp_supported_dtype is torch.emu.get_amp_supported_dtype
    assert not torch.emu.is_autocast_enabled()
    assert torch.emu.get_autocast_dtype() == torch.float16  # the default, as on CUDA
    with torch.autocast("emu", dtype=torch.bfloat16):
        assert torch.emu.is_autocast_enabled()
        assert torch.emu.get_autocast_dtype() == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")
    assert not torch.emu.is_autocast_enabled()
    assert torch.emu.get_autocast_dtype() == torch.float16
    for name in ("amp", "get_amp_supported_dtype", "is_autocast_enabled", "set_autocast_enabled",
                 "get_autocast_dtype", "set_autocast_dtype"):
        assert name in torch.emu.__all__


def test_set_autocast_state():
    try:
        torch.emu.set_autocast_dtype(torch.bfloat16)
        torch.emu.set_autocast_enabled(True)
        assert torch.is_autocast_enabled("emu")
        a = torch.randn(4, 4, device="emu")
        assert (a @ a).dtype == torch.bfloat16
    finally:
        torch.emu.set_autocast_enabled(False)
        torch.emu.set_autocast_dtype(torch.float16)
    assert (a @ a).dtype == torch.float32


# --------------------------------------------------------------------------
# Policies, op by op.
# --------------------------------------------------------------------------

# (name, fn, input shapes): ops in CUDA's lower-precision list, which CPU's
# autocast also runs in lower precision, so CPU autocast is the reference.
LOWER_PRECISION = [
    ("mm", torch.mm, [(8, 6), (6, 5)]),
    ("matmul", torch.matmul, [(3, 8, 6), (6, 5)]),
    ("bmm", torch.bmm, [(3, 8, 6), (3, 6, 5)]),
    ("addmm", torch.addmm, [(8, 5), (8, 6), (6, 5)]),
    ("baddbmm", torch.baddbmm, [(3, 8, 5), (3, 8, 6), (3, 6, 5)]),
    ("linear", F.linear, [(8, 6), (5, 6), (5,)]),
    ("prelu", F.prelu, [(4, 3, 5), (3,)]),
    ("conv1d", F.conv1d, [(2, 3, 10), (4, 3, 3)]),
    ("conv2d", F.conv2d, [(2, 3, 8, 8), (4, 3, 3, 3), (4,)]),
    ("conv_transpose2d", F.conv_transpose2d, [(2, 3, 6, 6), (3, 4, 3, 3)]),
]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name,fn,shapes", LOWER_PRECISION, ids=[c[0] for c in LOWER_PRECISION])
def test_lower_precision_ops(name, fn, shapes, dtype, baseline_memory):
    torch.manual_seed(0)
    cpu_args = [torch.randn(s) for s in shapes]
    emu_args = [t.to("emu") for t in cpu_args]
    with torch.autocast("emu", dtype=dtype):
        out = fn(*emu_args)
    with torch.autocast("cpu", dtype=dtype):
        ref = fn(*cpu_args)
    assert out.device.type == "emu"
    assert out.dtype == dtype
    assert ref.dtype == dtype
    torch.testing.assert_close(out.cpu(), ref)
    # And within the dtype's precision of the float32 result.
    torch.testing.assert_close(out.cpu().float(), fn(*cpu_args), atol=0.1, rtol=0.05)


def test_lower_precision_einsum_and_attention(baseline_memory):
    q, k, v = (torch.randn(2, 4, 8, 16, device="emu") for _ in range(3))
    with torch.autocast("emu", dtype=torch.bfloat16):
        assert torch.einsum("bhqd,bhkd->bhqk", q, k).dtype == torch.bfloat16
        out = F.scaled_dot_product_attention(q, k, v)
        assert out.dtype == torch.bfloat16
    ref = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu())
    torch.testing.assert_close(out.cpu().float(), ref, atol=0.05, rtol=0.05)


# (name, fn(x, t)): ops CUDA runs in float32. x is lower precision (positive
# where the op needs it), t a float32 tensor in [0, 1). The reference is the
# float32 op on the same values, upcast.
FP32_OPS = [
    ("exp", lambda x, t: torch.exp(x)),
    ("log", lambda x, t: torch.log(x)),
    ("pow", lambda x, t: torch.pow(x, 2)),
    ("rsqrt", lambda x, t: torch.rsqrt(x)),
    ("softmax", lambda x, t: torch.softmax(x, 1)),
    ("log_softmax", lambda x, t: F.log_softmax(x, 1)),
    ("layer_norm", lambda x, t: F.layer_norm(x, (5,))),
    ("group_norm", lambda x, t: F.group_norm(x.reshape(6, 5, 1), 5)),
    ("mse_loss", lambda x, t: F.mse_loss(x, x.flip(0))),
    ("l1_loss", lambda x, t: F.l1_loss(x, x.flip(0))),
    ("bce_with_logits", lambda x, t: F.binary_cross_entropy_with_logits(x, t)),
    ("sum", lambda x, t: torch.sum(x)),
    ("cumsum", lambda x, t: torch.cumsum(x, 1)),
    ("prod", lambda x, t: torch.prod(x, 1)),
    ("logsumexp", lambda x, t: torch.logsumexp(x, 1)),
    ("norm", lambda x, t: torch.norm(x)),
    ("cdist", lambda x, t: torch.cdist(x, x)),
    ("cosine_similarity", lambda x, t: F.cosine_similarity(x, x.flip(0))),
]
POSITIVE = {"log", "rsqrt"}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name,fn", FP32_OPS, ids=[c[0] for c in FP32_OPS])
def test_fp32_ops(name, fn, dtype, baseline_memory):
    torch.manual_seed(0)
    x = torch.randn(6, 5)
    x = (x.abs() + 0.5 if name in POSITIVE else x).to(dtype)
    t = torch.rand(6, 5)
    with torch.autocast("emu", dtype=dtype):
        out = fn(x.to("emu"), t.to("emu"))
    assert out.device.type == "emu"
    assert out.dtype == torch.float32, f"{name} ran in {out.dtype}"
    torch.testing.assert_close(out.cpu(), fn(x.float(), t), atol=1e-5, rtol=1e-5)


def test_fp32_nll_loss(baseline_memory):
    logp = F.log_softmax(torch.randn(6, 5), 1)
    target = torch.tensor([0, 2, 1, 4, 3, 0])
    with torch.autocast("emu"):
        out = F.nll_loss(logp.half().to("emu"), target.to("emu"))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), F.nll_loss(logp.half().float(), target))


def test_fp32_set_opt_dtype_respects_explicit_dtype():
    x = torch.randn(6, 5, device="emu", dtype=torch.float16)
    with torch.autocast("emu"):
        assert torch.softmax(x, 1).dtype == torch.float32
        assert torch.softmax(x, 1, dtype=torch.float64).dtype == torch.float64
        assert torch.sum(x, dtype=torch.float64).dtype == torch.float64


# (name, fn(a32, b16, c16)): mixed-dtype inputs run in the widest dtype.
PROMOTE_OPS = [
    ("cat", lambda a, b, c: torch.cat([a, b, c])),  # promotes natively
    ("stack", lambda a, b, c: torch.stack([a, b, c])),  # promotes natively
    ("addcmul", torch.addcmul),
    ("addcdiv", torch.addcdiv),
    ("atan2", lambda a, b, c: torch.atan2(a, b)),
    ("cross", lambda a, b, c: torch.cross(a[:, :3], b[:, :3], dim=1)),
    ("dot", lambda a, b, c: torch.dot(a[0], b[0])),
    ("tensordot", lambda a, b, c: torch.tensordot(a, b.t(), dims=1)),
    ("scatter_add", lambda a, b, c: a.scatter_add(1, torch.zeros(4, 5, dtype=torch.long, device=a.device), b)),
    ("index_put", lambda a, b, c: a.index_put((torch.tensor([0, 2], device=a.device),), b[:2])),
]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name,fn", PROMOTE_OPS, ids=[c[0] for c in PROMOTE_OPS])
def test_promote_ops(name, fn, dtype, baseline_memory):
    torch.manual_seed(0)
    a = torch.randn(4, 5)
    b = torch.randn(4, 5).to(dtype)
    c = (torch.rand(4, 5) + 0.5).to(dtype)  # a safe divisor for addcdiv
    with torch.autocast("emu", dtype=dtype):
        out = fn(a.to("emu"), b.to("emu"), c.to("emu"))
        low = fn(a.to(dtype).to("emu"), b.to("emu"), c.to("emu"))
    assert out.dtype == torch.float32, f"{name} ran in {out.dtype}"
    assert low.dtype == dtype  # all-low inputs stay low
    torch.testing.assert_close(out.cpu(), fn(a, b.float(), c.float()), atol=1e-5, rtol=1e-5)


def test_unlisted_ops_keep_their_dtype():
    x = torch.randn(4, 4, device="emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        assert torch.relu(x).dtype == torch.float32
        assert (x + 1).dtype == torch.float32
        assert torch.relu(x.half()).dtype == torch.float16
        y = x @ x  # bfloat16
        assert (y + x).dtype == torch.float32  # ordinary type promotion


def test_integer_and_cpu_tensors_untouched():
    a = torch.randint(0, 5, (4, 4), device="emu")
    with torch.autocast("emu", dtype=torch.float16):
        assert (a @ a).dtype == torch.int64  # only floating point is cast
        c = torch.randn(4, 4)
        assert (c @ c).dtype == torch.float32  # CPU tensors follow CPU autocast (off)


def test_disabled_region_and_second_device():
    x = torch.randn(4, 4, device="emu:1")
    with torch.autocast("emu", dtype=torch.bfloat16):
        y = x @ x
        assert y.dtype == torch.bfloat16 and y.device == torch.device("emu:1")
        with torch.autocast("emu", enabled=False):
            assert (x @ x).dtype == torch.float32
            assert (y @ y).dtype == torch.bfloat16  # no cast back up when disabled


def test_backward_through_autocast(baseline_memory):
    torch.manual_seed(0)
    w_cpu = torch.randn(5, 6)
    x_cpu = torch.randn(8, 6)
    w = w_cpu.to("emu").requires_grad_()
    with torch.autocast("emu", dtype=torch.bfloat16):
        out = F.linear(x_cpu.to("emu"), w)
        loss = F.mse_loss(out, torch.zeros(8, 5, device="emu"))
    assert out.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert w.grad.dtype == torch.float32 and w.grad.device.type == "emu"
    w_ref = w_cpu.clone().requires_grad_()
    F.mse_loss(F.linear(x_cpu, w_ref), torch.zeros(8, 5)).backward()
    torch.testing.assert_close(w.grad.cpu(), w_ref.grad, atol=0.05, rtol=0.05)
    del w, out, loss


def test_emu_amp_autocast_context_and_decorator():
    x = torch.randn(4, 4, device="emu")
    with torch.emu.amp.autocast(dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16

    @torch.emu.amp.autocast()
    def f(t):
        return t @ t

    assert f(x).dtype == torch.float16
    assert (x @ x).dtype == torch.float32


def test_custom_fwd_casts_inputs():
    class Square(torch.autograd.Function):
        @staticmethod
        @torch.emu.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t @ t

        @staticmethod
        @torch.emu.amp.custom_bwd
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g @ t.t() + t.t() @ g

    x = torch.randn(4, 4, device="emu", requires_grad=True)
    with torch.autocast("emu"):
        y = Square.apply(x.half())
    assert y.dtype == torch.float32  # autocast is off inside, inputs cast to fp32


# --------------------------------------------------------------------------
# Bad inputs.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32], ids=str)
def test_torch_autocast_unsupported_dtype_warns_and_disables(dtype):
    """PyTorch's documented behaviour for a backend's unsupported dtype: a
    warning naming the supported dtypes, and autocast disabled."""
    x = torch.randn(4, 4, device="emu")
    with pytest.warns(UserWarning, match="emu Autocast only supports dtypes of torch.float16, torch.bfloat16"):
        ctx = torch.autocast("emu", dtype=dtype)
    with ctx:
        assert not torch.is_autocast_enabled("emu")
        assert (x @ x).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, "float16"], ids=str)
def test_emu_amp_unsupported_dtype_raises(dtype):
    with pytest.raises(ValueError, match="emu autocast supports the dtypes torch.float16, torch.bfloat16"):
        torch.emu.amp.autocast(dtype=dtype)
    with pytest.raises(ValueError, match="emu autocast supports the dtypes"):
        torch.emu.set_autocast_dtype(dtype)
    assert torch.emu.get_autocast_dtype() == torch.float16
    torch.emu.amp.autocast(enabled=False, dtype=dtype)  # disabled: no check, like torch.autocast


def test_binary_cross_entropy_refused():
    p = torch.rand(4, device="emu")
    with torch.autocast("emu"):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, p)
    F.binary_cross_entropy(p, p)  # fine outside autocast


def test_amp_kernel_argument_checks():
    g = [torch.randn(3, device="emu")]
    inv = torch.ones((), device="emu")
    with pytest.raises(RuntimeError, match="found_inf must be a Float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(g, torch.zeros((), device="emu", dtype=torch.float64), inv)
    with pytest.raises(RuntimeError, match="inv_scale must be a one-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(g, torch.zeros((), device="emu"), torch.ones(2, device="emu"))
    with pytest.raises(RuntimeError, match="all gradients must be on emu:0"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            [torch.randn(3, device="emu:1")], torch.zeros((), device="emu"), inv)
    with pytest.raises(RuntimeError, match="gradients must be floating point"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(3, device="emu", dtype=torch.int32)], torch.zeros((), device="emu"), inv)
    scale = torch.ones((), device="emu")
    with pytest.raises(RuntimeError, match="growth_tracker must be a Int tensor"):
        torch._amp_update_scale_(scale, torch.zeros((), device="emu"), torch.zeros((), device="emu"), 2.0, 0.5, 3)


# --------------------------------------------------------------------------
# GradScaler kernels against CPU's.
# --------------------------------------------------------------------------


def _grads(dtype):
    torch.manual_seed(0)
    return [
        torch.randn(1000).to(dtype) * 100,
        torch.randn(7, 9).to(dtype).t(),  # non-contiguous
        torch.randn(0).to(dtype),  # empty
        torch.randn(70000).to(dtype),  # large enough for several threads
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("bad", [None, math.inf, -math.inf, math.nan])
def test_unscale_matches_cpu(dtype, bad, baseline_memory):
    cpu = _grads(dtype)
    if bad is not None:
        cpu[3][65000] = bad  # deep inside the last, largest gradient
    emu = [g.to("emu") for g in cpu]
    views = [g for g in emu]
    for found_inf, inv, grads in (
        (torch.zeros(()), torch.full((), 1 / 1024), cpu),
        (torch.zeros((), device="emu"), torch.full((), 1 / 1024, device="emu"), emu),
    ):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv)
        assert found_inf.item() == (0.0 if bad is None else 1.0)
    for e, v, c in zip(emu, views, cpu):
        assert e is v and e.stride() == c.stride()  # in place
        torch.testing.assert_close(e.cpu(), c, equal_nan=True, atol=0, rtol=0)


def test_unscale_never_clears_found_inf(baseline_memory):
    found_inf = torch.ones((), device="emu")
    grads = [torch.ones(4, device="emu")]
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, torch.full((), 0.5, device="emu"))
    assert found_inf.item() == 1.0
    assert grads[0].cpu().tolist() == [0.5] * 4


def test_update_scale_matches_cpu(baseline_memory):
    pattern = [0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0]
    states = {}
    for device in ("cpu", "emu"):
        scale = torch.full((), 1024.0, device=device)
        tracker = torch.zeros((), dtype=torch.int32, device=device)
        seq = []
        for bad in pattern:
            found = torch.full((), float(bad), device=device)
            out = torch._amp_update_scale_(scale, tracker, found, 2.0, 0.25, 3)
            assert out is scale
            seq.append((scale.item(), tracker.item()))
        states[device] = seq
    assert states["emu"] == states["cpu"]
    assert states["emu"][:4] == [(1024.0, 1), (1024.0, 2), (256.0, 0), (256.0, 1)]
    assert states["emu"][5] == (512.0, 0)  # grew after 3 clean steps in a row


def test_update_scale_keeps_finite_scale(baseline_memory):
    scale = torch.full((), 3e38, device="emu")
    tracker = torch.zeros((), dtype=torch.int32, device="emu")
    torch._amp_update_scale_(scale, tracker, torch.zeros((), device="emu"), 2.0, 0.5, 1)
    assert scale.item() == pytest.approx(3e38) and tracker.item() == 0  # growth would overflow


# --------------------------------------------------------------------------
# Training.
# --------------------------------------------------------------------------


def _data(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 32, generator=g)
    w = torch.randn(32, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(512, 1, generator=g)
    return x.to(device), y.to(device)


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).to(device)


def _train(dtype, scaler, steps=40, inject_inf_at=None, device="emu"):
    model = _model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = _data(device)
    losses, scales, skipped = [], [], []
    for step in range(steps):
        opt.zero_grad()
        with torch.autocast(device, dtype=dtype or torch.float16, enabled=dtype is not None):
            loss = F.mse_loss(model(x), y)
        assert loss.dtype == torch.float32
        (scaler.scale(loss) if scaler else loss).backward()
        if step == inject_inf_at:
            model[2].weight.grad[3, 5] = math.inf
        before = [p.detach().clone() for p in model.parameters()]
        if scaler:
            scale = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            scales.append((scale, scaler.get_scale()))
        else:
            opt.step()
        skipped.append(all(torch.equal(b, p) for b, p in zip(before, model.parameters())))
        losses.append(loss.item())
    return losses, scales, skipped


# Tolerances: autocast runs the three Linear layers in the low dtype, whose
# unit roundoff is 2**-11 (fp16) or 2**-8 (bf16) relative; the loss itself is
# computed in float32 (mse_loss is an fp32 op) and averages 512 samples, so
# rounding errors mostly average out. Measured, the loss curves of 40 steps
# stay within 0.1% (fp16) and 0.2% (bf16) of float32 training. The bounds,
# 1% and 3% (about 20 and 8 unit roundoffs), leave headroom for rounding that
# differs with kernels and thread counts, yet catch what breaks mixed-precision
# training: a missing unscale (gradients 65536x too large blow SGD up within
# a step or two), skipped good steps (the parameters stop moving), overflow.
# They do not pin down the policies, which are checked op by op above: even
# the loss computed in bf16 moves this curve by only 0.3%.
@pytest.mark.parametrize("dtype,scaled,rtol", [(torch.float16, True, 0.01), (torch.bfloat16, False, 0.03)],
                         ids=["fp16", "bf16"])
def test_mixed_precision_training_tracks_fp32(dtype, scaled, rtol, baseline_memory):
    ref, _, _ = _train(None, None)
    scaler = torch.amp.GradScaler("emu", growth_interval=10) if scaled else None
    losses, scales, skipped = _train(dtype, scaler)
    assert ref[-1] < 0.7 * ref[0]  # it did learn
    for step, (a, b) in enumerate(zip(losses, ref)):
        assert abs(a - b) <= rtol * b, f"step {step}: {a} vs fp32 {b}"
    assert not any(skipped)
    if scaled:
        assert scales[0][0] == 2.0**16
        assert scales[-1][1] > 2.0**16  # grew every 10 clean steps
    del scaler


def test_grad_scaler_skips_step_with_inf(baseline_memory):
    scaler = torch.amp.GradScaler("emu", init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    losses, scales, skipped = _train(torch.float16, scaler, steps=12, inject_inf_at=4)
    # Exactly step 4 is skipped: its parameters are unchanged, the scale halves.
    assert skipped == [i == 4 for i in range(12)]
    assert scales[4] == (scales[4][0], scales[4][0] * 0.5)
    # Before: 2**10 grows once after 3 clean steps (steps 0-2). After the skip
    # the tracker restarts: grows again after steps 5-7 and 8-10.
    assert [s for s, _ in scales] == [1024, 1024, 1024, 2048, 2048, 1024, 1024, 1024, 2048, 2048, 2048, 4096]
    # Training continued: the loss goes on falling after the skipped step.
    assert losses[-1] < losses[5] < losses[0]
    # The skipped step changed nothing: step 5 sees step 4's parameters, and
    # from then on the run is the clean run one step later (scales are powers
    # of two, so the unscaled gradients agree up to fp16 underflow).
    assert losses[5] == losses[4]
    clean, _, _ = _train(torch.float16, torch.amp.GradScaler("emu", init_scale=2.0**10, growth_interval=3), steps=11)
    for step in range(5, 12):
        assert losses[step] == pytest.approx(clean[step - 1], rel=1e-4)
    del scaler


def test_grad_scaler_unscale_and_clip(baseline_memory):
    """unscale_ before clipping (the documented recipe) leaves true gradients."""
    model = _model("emu")
    x, y = _data("emu")
    scaler = torch.amp.GradScaler("emu", init_scale=256.0)
    with torch.autocast("emu"):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(torch.optim.SGD(model.parameters(), lr=0.1))
    ref = _model("cpu")
    xc, yc = _data("cpu")
    with torch.autocast("cpu", dtype=torch.float16):
        F.mse_loss(ref(xc), yc).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=2e-3, rtol=2e-2)
    del scaler


def test_emu_amp_grad_scaler_shortcut():
    scaler = torch.emu.amp.GradScaler(init_scale=8.0)
    assert scaler.is_enabled() and scaler.get_scale() == 8.0
    assert scaler.scale(torch.ones((), device="emu")).item() == 8.0


def test_grad_scaler_two_devices(baseline_memory):
    """Parameters on emu:0 and emu:1: GradScaler checks each device's gradients
    with that device's copy of inv_scale/found_inf, and one inf skips the step."""
    a = torch.nn.Linear(4, 4).to("emu:0")
    b = torch.nn.Linear(4, 1).to("emu:1")
    opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
    scaler = torch.amp.GradScaler("emu", init_scale=64.0)
    x = torch.randn(8, 4, device="emu:0")
    for inject in (False, True):
        opt.zero_grad()
        with torch.autocast("emu", dtype=torch.float16):
            loss = b(a(x).to("emu:1")).float().pow(2).mean()
        scaler.scale(loss).backward()
        if inject:
            b.weight.grad[0, 1] = math.nan
        before = [p.detach().clone() for p in (*a.parameters(), *b.parameters())]
        scaler.step(opt)
        scaler.update()
        after = list((*a.parameters(), *b.parameters()))
        assert all(torch.equal(p, q) for p, q in zip(before, after)) == inject
    assert scaler.get_scale() == 32.0
    del scaler, opt, a, b, x, loss, before, after


STRICT_SCRIPT = """
import math, torch, torch.nn.functional as F
torch.manual_seed(0)  # fixed data: a random batch could overflow float16 by itself
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("emu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("emu", growth_interval=2)
x, y = torch.randn(32, 8, device="emu"), torch.randn(32, 1, device="emu")
for step in range(6):
    opt.zero_grad()
    with torch.autocast("emu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    if step == 3:
        model[0].weight.grad[0, 0] = math.inf
    scaler.step(opt)
    scaler.update()
print(scaler.get_scale())
"""


def test_amp_under_strict_mode():
    """With device memory protected from the host, autocast and GradScaler
    still work: the amp kernels touch device memory only inside kernels."""
    r = run_after_import(STRICT_SCRIPT, TORCH_EMU_STRICT="1")
    assert r.returncode == 0, r.stderr
    # 2**16, grown after steps 0-1, halved at step 3, grown after steps 4-5.
    assert float(r.stdout.split()[-1]) == 2.0**17
