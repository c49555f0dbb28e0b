"""Graph capture and replay: torch.emu.EmuGraph / torch.emu.graph /
make_graphed_callables / torch.accelerator.Graph against eager results, the
CUDA rules of capture, private memory pools and random numbers."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytestmark = pytest.mark.launch_mode


def capture(fn, pool=None):
    g = torch.emu.EmuGraph()
    with torch.emu.graph(g, pool=pool):
        out = fn()
    return g, out


# ---- capture and replay against eager ---------------------------------------------


def elementwise_matmul_fallback(x, w):
    y = (x * 2 + 1).relu() @ w  # native kernels (structured elementwise, mm)
    y.add_(0.5)  # in place
    z = torch.special.i0e(y) + torch.logaddexp(y, x)  # fallback ops
    return torch.cat([y, z], 1).softmax(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_replay_matches_eager(dtype, baseline_memory):
    x = torch.randn(16, 16, device="emu", dtype=dtype)
    w = torch.randn(16, 16, device="emu", dtype=dtype)
    g, out = capture(lambda: elementwise_matmul_fallback(x, w))
    for _ in range(3):
        new = torch.randn(16, 16, dtype=dtype)
        x.copy_(new)
        g.replay()
        torch.testing.assert_close(out.cpu(), elementwise_matmul_fallback(new, w.cpu()))
    del g, out, x, w


def test_capture_runs_nothing_and_replay_runs_in_place_updates(baseline_memory):
    x = torch.zeros(8, device="emu")
    side = torch.emu.Stream()
    side.wait_stream(torch.emu.current_stream())  # x is zeroed on the current stream
    with torch.emu.stream(side):
        x.add_(1)  # queued before the capture: it must be done, and kept
    g, _ = capture(lambda: x.mul_(2).add_(3))
    assert x.cpu().tolist() == [1.0] * 8  # as on CUDA, capturing does not run the work
    g.replay()
    g.replay()
    assert x.cpu().tolist() == [13.0] * 8  # (1*2+3)*2+3
    del g, x


def test_convolution_forward_and_backward(baseline_memory):
    conv = nn.Conv2d(2, 3, 3, padding=1)
    conv_emu = copy.deepcopy(conv).to("emu")
    x = torch.randn(2, 2, 6, 6, device="emu", requires_grad=True)

    def step():
        out = conv_emu(x)
        out.square().sum().backward()
        return out

    g, out = capture(step)
    for _ in range(2):
        new = torch.randn(2, 2, 6, 6)
        with torch.no_grad():
            x.copy_(new)
        g.replay()
        ref_x = new.clone().requires_grad_()
        ref = conv(ref_x)
        conv.zero_grad()
        ref.square().sum().backward()
        torch.testing.assert_close(out.cpu(), ref)
        torch.testing.assert_close(x.grad.cpu(), ref_x.grad)
        torch.testing.assert_close(conv_emu.weight.grad.cpu(), conv.weight.grad)
    del g, out, x, conv_emu


def test_replay_on_another_stream_and_integer_ops(baseline_memory):
    a = torch.arange(12, device="emu").reshape(3, 4)
    g, out = capture(lambda: (a * 3) % 5 + a.sum(0))
    a.copy_(torch.arange(12).reshape(3, 4).flip(0))
    with torch.emu.stream(torch.emu.Stream()):
        g.replay()
    ref = torch.arange(12).reshape(3, 4).flip(0)
    assert torch.equal(out.cpu(), (ref * 3) % 5 + ref.sum(0))
    del g, out, a


# ---- training steps ---------------------------------------------------------------


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 12, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


def eager_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


# Adam needs capturable=True (its step count on the device) to be captured; on
# CPU, for the reference, it must be False.
OPTIMIZERS = {
    "sgd": lambda p, emu: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p, emu: torch.optim.Adam(p, lr=1e-2, capturable=emu),
}


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_whole_training_step_capture(opt_name, baseline_memory):
    steps, warmup = 5, 2
    data = batches(warmup + steps)
    reference = mlp()
    ref_opt = OPTIMIZERS[opt_name](reference.parameters(), False)
    ref_losses = [eager_step(reference, ref_opt, x, y).detach() for x, y in data]

    model = copy.deepcopy(mlp()).to("emu")
    opt = OPTIMIZERS[opt_name](model.parameters(), True)
    static_x, static_y = torch.empty(8, 12, device="emu"), torch.empty(8, 4, device="emu")
    side = torch.emu.Stream()
    with torch.emu.stream(side):  # warm-up (optimizer state, .grad) as in CUDA's recipe
        for x, y in data[:warmup]:
            static_x.copy_(x)
            static_y.copy_(y)
            eager_step(model, opt, static_x, static_y)
    torch.emu.current_stream().wait_stream(side)
    g = torch.emu.EmuGraph()
    opt.zero_grad(set_to_none=True)
    with torch.emu.graph(g):
        static_loss = F.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    for x, y in data[warmup:]:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
    torch.testing.assert_close(static_loss.cpu(), ref_losses[-1])
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach())
    del g, static_loss, model, opt, static_x, static_y, p


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_make_graphed_callables_training(opt_name, baseline_memory):
    steps = 4
    data = batches(steps)
    reference = mlp()
    ref_opt = OPTIMIZERS[opt_name](reference.parameters(), False)
    model = copy.deepcopy(mlp()).to("emu")
    opt = OPTIMIZERS[opt_name](model.parameters(), True)
    sample = torch.randn(8, 12, device="emu", requires_grad=True)
    graphed = torch.emu.make_graphed_callables(model, (sample,))
    assert graphed is model
    for x, y in data:
        xr = x.clone().requires_grad_()
        eager_step(reference, ref_opt, xr, y)
        xe = x.to("emu").requires_grad_()
        opt.zero_grad(set_to_none=True)
        out = graphed(xe)
        F.mse_loss(out, y.to("emu")).backward()
        opt.step()
        torch.testing.assert_close(xe.grad.cpu(), xr.grad)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach())
    model.eval()  # not the mode it was captured in: eager forward
    torch.testing.assert_close(model(data[0][0].to("emu")).cpu(), reference.eval()(data[0][0]))
    del graphed, model, opt, sample, out, xe, p


def test_make_graphed_callables_function_and_bad_inputs(baseline_memory):
    w = torch.randn(5, 3, device="emu", requires_grad=True)

    def fn(a):
        return (a @ w).sin()

    a = torch.randn(4, 5, device="emu", requires_grad=True)
    graphed = torch.emu.make_graphed_callables(fn, (a,))
    x = torch.randn(4, 5)
    xe = x.to("emu").requires_grad_()
    graphed(xe).sum().backward()
    xc = x.clone().requires_grad_()
    (xc @ w.detach().cpu()).sin().sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    with pytest.raises(ValueError, match="emu tensors"):
        torch.emu.make_graphed_callables(fn, (torch.randn(4, 5),))
    with pytest.raises(TypeError, match="only Tensors"):
        torch.emu.make_graphed_callables(fn, (3,))
    del graphed, a, w, xe


# ---- what capture forbids -----------------------------------------------------------

ILLEGAL = {
    "item": lambda x: x.sum().item(),
    "cpu": lambda x: x.cpu(),
    "blocking_h2d": lambda x: x.copy_(torch.ones(4)),
    "nonzero": lambda x: x.nonzero(),
    "device_synchronize": lambda x: torch.emu.synchronize(),
    "stream_synchronize": lambda x: torch.emu.current_stream().synchronize(),
    "stream_query": lambda x: torch.emu.current_stream().query(),
    "event_synchronize": lambda x: _recorded_event().synchronize(),
}


def _recorded_event():
    e = torch.emu.Event()
    e.record()
    return e


@pytest.mark.parametrize("name", ILLEGAL)
def test_synchronising_calls_fail_and_invalidate_the_capture(name, baseline_memory):
    x = torch.ones(4, device="emu")
    g = torch.emu.EmuGraph()
    with pytest.raises(RuntimeError, match="capturing|captures a graph|capture"):
        with torch.emu.graph(g):
            x.add_(1)
            ILLEGAL[name](x)
    assert not torch.emu.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="replay\\(\\) needs a captured graph"):
        g.replay()
    assert x.cpu().tolist() == [1.0] * 4
    # The device is usable, and can capture again.
    g2, y = capture(lambda: x * 3)
    g2.replay()
    assert y.cpu().tolist() == [3.0] * 4
    del g, g2, x, y


def test_nested_graph_is_refused_at_entry_and_the_outer_capture_goes_on(baseline_memory):
    x = torch.ones(4, device="emu")
    outer, inner = torch.emu.EmuGraph(), torch.emu.EmuGraph()
    side = torch.emu.Stream(device=1)
    with torch.emu.graph(outer):
        y = x * 2
        for stream in (None, side):  # this device, and another device's stream from this one
            with pytest.raises(torch.AcceleratorError, match="emu:0 is capturing another graph already "
                                                             r"\(one capture per device at a time\)"):
                with torch.emu.graph(inner, stream=stream):
                    pytest.fail("the body of a nested capture ran")
        assert torch.emu.is_current_stream_capturing()
        z = y + 1
    x.fill_(3.0)
    outer.replay()
    assert (y.cpu().tolist(), z.cpu().tolist()) == ([6.0] * 4, [7.0] * 4)
    inner, w = capture(lambda: x * 5)  # the refused captures left nothing behind
    x.fill_(1.0)
    inner.replay()
    assert w.cpu().tolist() == [5.0] * 4
    del outer, inner, x, y, z, w


def test_capture_on_default_stream_is_refused(baseline_memory):
    g = torch.emu.EmuGraph()
    with pytest.raises(RuntimeError, match="default stream"):
        g.capture_begin()
    assert not torch.emu.is_current_stream_capturing()


def test_uncapturable_kernel_names_its_op(baseline_memory):
    cell = nn.LSTMCell(4, 4).to("emu")
    x = torch.randn(2, 4, device="emu")
    g = torch.emu.EmuGraph()
    with pytest.raises(NotImplementedError, match="lstm.*cannot be captured into an emu graph"):
        with torch.emu.graph(g):
            cell(x)
    assert not torch.emu.is_current_stream_capturing()
    del cell, x


def test_bad_arguments(baseline_memory):
    g = torch.emu.EmuGraph()
    with pytest.raises(ValueError, match="capture_error_mode"):
        g.capture_begin(capture_error_mode="sometimes")
    with pytest.raises(RuntimeError, match="capture_end\\(\\) without capture_begin"):
        g.capture_end()
    x = torch.ones(3, device="emu")
    g, _ = capture(lambda: x.add_(1))
    with pytest.raises(RuntimeError, match="reset\\(\\) before capturing again"):
        with torch.emu.graph(g):
            pass
    del g, x


@pytest.mark.parametrize("flag", ["enable_annotations", "check_input_liveness"])
def test_cuda_debugging_flags_say_why_they_do_not_apply(flag, baseline_memory):
    with pytest.raises(RuntimeError, match=f"{flag}=True"):
        torch.emu.graph(torch.emu.EmuGraph(), **{flag: True})


def test_graph_keeps_its_inputs_memory(baseline_memory):
    # Why check_input_liveness has nothing to check: a deleted input is not
    # freed while the graph can still replay.
    x = torch.ones(4096, device="emu")
    g, y = capture(lambda: x * 2)
    before = torch.emu.memory_allocated()
    del x
    assert torch.emu.memory_allocated() == before
    g.replay()
    torch.emu.synchronize()
    assert torch.equal(y.cpu(), torch.full((4096,), 2.0))
    del g, y


# ---- status, pools, reset -------------------------------------------------------


def test_is_current_stream_capturing_and_debug_dump(tmp_path, baseline_memory):
    assert not torch.emu.is_current_stream_capturing()
    x = torch.ones(3, device="emu")
    g = torch.emu.EmuGraph()
    g.enable_debug_mode()
    seen = []
    with torch.emu.graph(g):
        seen.append(torch.emu.is_current_stream_capturing())
        y = torch.special.i0e(x * 2)
    assert seen == [True] and not torch.emu.is_current_stream_capturing()
    g.debug_dump(str(tmp_path / "g.txt"))
    text = (tmp_path / "g.txt").read_text()
    assert "kernel" in text and "aten::special_i0e" in text
    del g, x, y


def test_replays_reuse_the_captured_memory(baseline_memory):
    x = torch.randn(64, 64, device="emu")
    g, out = capture(lambda: elementwise_matmul_fallback(x, x))
    g.replay()
    stats = (torch.emu.memory_allocated(), torch.emu.memory_reserved())
    for _ in range(5):
        g.replay()
    assert (torch.emu.memory_allocated(), torch.emu.memory_reserved()) == stats
    # Dropping the output does not hand its memory to others while the graph lives.
    ptr = out.data_ptr()
    del out
    others = [torch.empty(16, 32, device="emu") for _ in range(4)]
    assert all(t.data_ptr() != ptr for t in others)
    del g, x, others


def test_two_graphs_share_a_pool(baseline_memory):
    pool = torch.emu.graph_pool_handle()
    x = torch.randn(32, device="emu")
    g1, y = capture(lambda: x * 2, pool=pool)
    g2, z = capture(lambda: y.exp() + x, pool=g1.pool())
    assert g1.pool() == g2.pool() == pool
    for _ in range(2):
        new = torch.randn(32)
        x.copy_(new)
        g1.replay()
        g2.replay()
        torch.testing.assert_close(z.cpu(), (new * 2).exp() + new)
    del g1, g2, x, y, z


def test_reset_and_recapture(baseline_memory):
    x = torch.ones(4, device="emu")
    g, y = capture(lambda: x + 1)
    g.reset()
    with pytest.raises(RuntimeError, match="needs a captured graph"):
        g.replay()
    y.cpu()  # still a valid tensor after reset (its value is unspecified, as on CUDA)
    with torch.emu.graph(g):
        y2 = x * 5
    g.replay()
    assert y2.cpu().tolist() == [5.0] * 4
    del g, x, y, y2


def test_accelerator_graph(baseline_memory):
    assert torch._C._acceleratorGraph is not None
    x = torch.zeros(5, device="emu")
    stream = torch.Stream(device="emu")
    g = torch.accelerator.Graph()
    with stream, g:
        x += 1
    assert x.cpu().tolist() == [0.0] * 5
    g.replay()
    g.replay()
    assert x.cpu().tolist() == [2.0] * 5
    del g, x


# ---- random numbers -------------------------------------------------------------


def test_random_ops_advance_per_replay_like_eager(baseline_memory):
    x = torch.ones(256, device="emu")
    torch.manual_seed(7)
    state = torch.emu.get_rng_state()
    g, (d, r) = capture(lambda: (F.dropout(x, 0.5), torch.randn(16, device="emu")))
    assert torch.equal(torch.emu.get_rng_state(), state)  # capturing drew nothing
    replays = []
    for _ in range(3):
        g.replay()
        replays.append((d.cpu(), r.cpu()))
    torch.manual_seed(7)
    for dg, rg in replays:
        assert torch.equal(dg, F.dropout(x, 0.5).cpu())
        assert torch.equal(rg, torch.randn(16, device="emu").cpu())
    assert not torch.equal(replays[0][1], replays[1][1])
    del g, d, r, x


# ---- the runtime API itself ---------------------------------------------------------


def test_runtime_stream_capture():
    """tests/native/test_graphs.cpp against the runtime alone (no torch): linked with the runtime's
    release library, the one the extension links."""
    from test_runtime_native import _run, native_programs

    binary = native_programs("test_graphs") / "bin" / "test_graphs"
    result = _run([binary])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all graph checks passed" in result.stdout


def test_graph_on_a_given_stream_of_another_device(baseline_memory):
    assert torch.emu.Graph is torch.emu.EmuGraph
    stream = torch.emu.Stream(device=1)
    x = torch.ones(6, device="emu:1")
    g = torch.emu.Graph()
    with torch.emu.device(1), torch.emu.graph(g, stream=stream, capture_error_mode="thread_local"):
        assert torch.emu.current_stream(1) == stream and torch.emu.is_current_stream_capturing()
        y = x.cumsum(0) * 2
    assert torch.emu.current_stream(1) == torch.emu.default_stream(1)
    with torch.emu.device(1):
        g.replay()
    assert y.device == torch.device("emu:1")
    assert y.cpu().tolist() == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    del g, x, y
