"""torch.compile (Dynamo + Inductor) and torch.export on emu.

Every compiled result is compared with the same model run eagerly on emu and
on CPU. Inductor's caches are off, so each test really generates and builds
its kernels; models are tiny because every C++ kernel build takes seconds.
"""

import copy
import os
import threading
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend
from torch._inductor.utils import run_and_get_code

import torch_emu
from _after_import import run_after_import
from conftest import run_python

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def fresh_compiler():
    """No Inductor cache (a broken backend cannot pass from it) and no
    compiled frames carried over from another test."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()


def to(obj, device):
    return copy.deepcopy(obj).to(device)


def check_train_step(model, x, tol=TOL):
    """Forward and backward of ``model`` compiled on emu vs eager emu vs CPU:
    outputs and every parameter's gradient."""
    models = {"compiled": to(model, "emu"), "emu": to(model, "emu"), "cpu": to(model, "cpu")}
    runs = {"compiled": torch.compile(models["compiled"]), "emu": models["emu"], "cpu": models["cpu"]}
    outs = {}
    for name, run in runs.items():
        xi = x.to("cpu" if name == "cpu" else "emu")
        out = run(xi)
        out.square().mean().backward()
        outs[name] = out
    assert outs["compiled"].device == torch.device("emu:0")
    for ref in ("emu", "cpu"):
        torch.testing.assert_close(outs["compiled"].cpu(), outs[ref].detach().cpu(), **tol)
        for (pname, p), q in zip(models["compiled"].named_parameters(), models[ref].parameters()):
            assert p.grad.device.type == "emu", pname
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), **tol, msg=lambda m: f"{pname}: {m}")


# --- what is registered, and when -------------------------------------------


def test_registration_is_lazy_and_automatic():
    r = run_after_import(
        """
        import sys, torch
        print("torch._dynamo" in sys.modules, "torch._inductor" in sys.modules)
        y = torch.compile(lambda x: x.sin() + 1)(torch.zeros(3, device="emu"))
        from torch._dynamo.device_interface import get_interface_for_device
        from torch._inductor.codegen.common import get_scheduling_for_device, get_wrapper_codegen_for_device
        print(y.device, y.cpu().tolist(), get_interface_for_device("emu").__name__,
              get_scheduling_for_device("emu").__name__, get_wrapper_codegen_for_device("emu").__name__)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [
        "False", "False", "emu:0", "[1.0,", "1.0,", "1.0]", "EmuInterface", "EmuScheduling", "EmuWrapperCodegen"
    ]


@pytest.mark.launch_mode
def test_device_interface_delegates_to_torch_emu():
    from torch._dynamo.device_interface import get_interface_for_device

    di = get_interface_for_device("emu")
    assert get_interface_for_device("emu:1") is di
    assert di.device_count() == torch.emu.device_count() == 2 and di.is_available()
    assert di.current_device() == 0
    prev = di.exchange_device(1)
    assert prev == 0 and di.current_device() == 1 and torch.emu.current_device() == 1
    assert di.maybe_exchange_device(prev) == 1 and di.current_device() == 0
    with di.device(1):
        assert torch.emu.current_device() == 1
    assert di.get_device_properties(1) == torch.emu.get_device_properties(1)
    assert di.Worker.get_device_properties("emu:1").name == torch.emu.get_device_name(1)
    assert di.get_compute_capability() == 10 * torch.emu.get_device_capability()[0] + torch.emu.get_device_capability()[1]
    assert di.is_bf16_supported() == torch.emu.is_bf16_supported()
    # Streams and events are the real ones: work ordered through them.
    s = di.Stream(device=0)
    assert isinstance(s, torch.Stream) and s != di.current_stream()
    with di.stream(s):
        assert di.current_stream() == s
        x = torch.ones(1 << 16, device="emu") * 3
        done = di.Event(enable_timing=True)
        done.record()
    assert isinstance(done, torch.Event)
    di.current_stream().wait_event(done)
    assert di.get_raw_stream(0) == torch.emu.current_stream(0).native_handle != s.native_handle
    di._set_stream_by_id(s.stream_id, s.device_index, s.device_type)
    assert torch.emu.current_stream() == s
    di.set_stream(torch.emu.default_stream(0))
    di.synchronize(0)
    assert done.query() and x.sum().item() == 3 * (1 << 16)
    di.set_device(1)
    assert torch.emu.current_device() == 1
    di.set_device(0)


# LITERALINCLUDE START: TEST_EMPTY_STRIDED_BINDING
def test_generated_buffers_are_allocated_as_the_emu_operator_does(baseline_memory):
    """_empty_strided (CompileBindings.cpp): the wrapper's buffers without the
    dispatch, the same tensors as torch.empty_strided on emu, clear errors."""
    from torch_emu._C import _empty_strided

    t = _empty_strided((2, 3), (1, 2), torch.float16, 1)
    reference = torch.empty_strided((2, 3), (1, 2), dtype=torch.float16, device="emu:1")
    assert (t.device, t.dtype, t.shape, t.stride()) == (reference.device, reference.dtype, reference.shape,
                                                        reference.stride())
    assert t.untyped_storage().nbytes() == reference.untyped_storage().nbytes() and not t.requires_grad
    with torch.emu.device(1):
        assert _empty_strided((4,), (1,), torch.float32, -1).device == torch.device("emu:1")  # the current one
    assert _empty_strided((0, 5), (5, 1), torch.int64, 0).numel() == 0
    torch.use_deterministic_algorithms(True)  # filled as the operator fills
    try:
        assert _empty_strided((3,), (1,), torch.float32, 0).isnan().all()
    finally:
        torch.use_deterministic_algorithms(False)
    del t, reference

    for bad, error, match in [
        (([2], (1,), torch.float32, 0), TypeError, "size must be a tuple of ints, not list"),
        (((2.0,), (1,), torch.float32, 0), TypeError, "tuple of ints, not of float"),
        (((2, 3), (1,), torch.float32, 0), ValueError, "2 sizes but 1 strides"),
        (((2,), (1,), "float32", 0), TypeError, "dtype must be a torch.dtype"),
        (((-2,), (1,), torch.float32, 0), RuntimeError, "negative dimension -2"),
        (((2,), (1,), torch.float32), TypeError, "takes 4 arguments, got 3"),
        (((2,), (1,), torch.float32, 9), torch.AcceleratorError, "Invalid device emu:9"),
        (((2,), (1,), torch.float32, -5), torch.AcceleratorError, "Invalid device emu:-5"),
    ]:
        with pytest.raises(error, match=match):
            _empty_strided(*bad)
# LITERALINCLUDE END: TEST_EMPTY_STRIDED_BINDING


def test_launch_binding_arguments(baseline_memory):
    """_launch (CompileBindings.cpp) parses its arguments itself: named errors
    for bad ones, and a Python fn's result and exceptions pass through."""
    from torch_emu._C import _launch

    assert _launch(-1, lambda a, b: a + b, 2, 3) == 5
    assert _launch(1, lambda: torch.emu.current_device()) == 1  # the kernel runs on its device
    for bad, error, match in [
        ((0,), TypeError, "takes at least 2 arguments, got 1"),
        (("0", print), TypeError, "device must be an int, not str"),
        ((9, print), torch.AcceleratorError, "Invalid device emu:9"),
    ]:
        with pytest.raises(error, match=match):
            _launch(*bad)
    with pytest.raises(ZeroDivisionError):
        _launch(0, lambda: 1 / 0)


def test_generated_code_is_emu_code(baseline_memory):
    def f(x, w):
        return torch.relu(x @ w).sin() + 1

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    out, (code,) = run_and_get_code(torch.compile(f), x.to("emu"), w.to("emu"))
    assert out.device == torch.device("emu:0")
    torch.testing.assert_close(out.cpu(), f(x, w), **TOL)
    torch.testing.assert_close(out, f(x.to("emu"), w.to("emu")), **TOL)
    assert "from torch_emu._C import _empty_strided, _launch" in code
    assert "_launch(0, cpp_fused_" in code  # a generated C++ kernel, run as device work
    assert "extern_kernels.mm(" in code  # the emu mm operator
    # Buffers by emu's direct allocation on the graph's device, never on CPU.
    assert "= _empty_strided((8, 4), (4, 1), torch.float32, 0)" in code
    assert "= empty_strided(" not in code and "= empty_strided_cpu(" not in code
    del out


def test_emu_build_is_in_the_compile_caches_key_once_emu_starts():
    """A graph cached by another build of torch-emu is not loaded (its asserted strides or its
    code may be the old build's), and a program that never uses emu keeps PyTorch's keys."""
    r = run_python(
        """
        import torch
        from torch_emu.compile.cache_key import build_files
        print(repr(torch.compiler.config.cache_key_tag))
        torch.zeros(1, device="emu")
        print(torch.compiler.config.cache_key_tag)
        print(sorted({p.suffix for p in build_files()}), len(build_files()) > 4)
        """,
        TORCH_COMPILE_CACHE_KEY_TAG="mine",
    )
    assert r.returncode == 0, r.stderr
    before, after, files = r.stdout.splitlines()
    assert before == "'mine'"
    mine, emu = after.split("|")
    assert mine == "mine" and emu.startswith(f"torch_emu-{torch_emu.__version__}-")
    assert files == "['.py', '.so'] True"  # the extension and the compile package
    assert run_python("import torch; print(repr(torch.compiler.config.cache_key_tag))").stdout == "''\n"


def test_the_build_tag_changes_with_any_build_file(tmp_path):
    from torch_emu.compile.cache_key import build_tag

    files = [tmp_path / "_C.so", tmp_path / "inductor.py"]
    for f in files:
        f.write_text("one")
    tag = build_tag(files)
    assert build_tag(files) == tag
    files[1].write_text("other")  # another size
    assert build_tag(files) != tag
    tag = build_tag(files)
    os.utime(files[0], ns=(0, files[0].stat().st_mtime_ns + 1))  # rebuilt: a later time
    assert build_tag(files) != tag


@pytest.mark.parametrize("setting", ["cpp_wrapper", "fx_wrapper"])
def test_other_wrappers_are_rejected_clearly(setting):
    with torch._inductor.config.patch({setting: True}):
        with pytest.raises(Exception, match=rf"Python wrapper only; torch._inductor.config.{setting}=True .*not supported on emu"):
            torch.compile(lambda x: x + 1)(torch.ones(2, device="emu"))


# --- models ------------------------------------------------------------------


def test_mlp_forward_backward(baseline_memory):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    check_train_step(mlp, torch.randn(8, 16))


def test_cnn_forward_backward(baseline_memory):
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 10),
    )
    check_train_step(cnn, torch.randn(4, 3, 8, 8))


def test_cnn_inference(baseline_memory):
    """Inference compiles with Inductor's layout optimisation (channels-last
    weights), whose convolutions must have the fake convolution's strides."""
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    ).eval()
    x = torch.randn(4, 3, 16, 16)
    compiled = torch.compile(to(cnn, "emu"))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.emu()).cpu(), cnn(x), **TOL)
    del compiled


def test_transformer_block_forward_backward(baseline_memory):
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                       activation="gelu", batch_first=True)
    check_train_step(block, torch.randn(2, 6, 32), tol=dict(rtol=1e-4, atol=1e-4))


def test_compiled_optimizer_step(baseline_memory):
    torch.manual_seed(0)
    base = nn.Linear(8, 4)
    x = torch.randn(5, 8)
    runs = {}
    for name, device in (("compiled", "emu"), ("emu", "emu"), ("cpu", "cpu")):
        model = to(base, device)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        step = torch.compile(opt.step) if name == "compiled" else opt.step
        for _ in range(3):
            opt.zero_grad()
            model(x.to(device)).square().mean().backward()
            step()
        runs[name] = model
    for ref in ("emu", "cpu"):
        for p, q in zip(runs["compiled"].parameters(), runs[ref].parameters()):
            assert p.device.type == "emu"
            torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), **TOL)


# --- Dynamo features ---------------------------------------------------------


def test_dynamic_shapes_do_not_recompile(baseline_memory):
    counter = CompileCounterWithBackend("inductor")
    bns = {"emu": nn.BatchNorm1d(7).to("emu"), "cpu": nn.BatchNorm1d(7)}  # batch statistics: sizes in the kernel

    def f(bn, x):
        return F.layer_norm(bn(x), x.shape[-1:]).relu() * 2

    compiled = torch.compile(f, backend=counter, dynamic=True)
    compiles = []
    for batch in (3, 5, 9):
        x = torch.randn(batch, 7)
        out = compiled(bns["emu"], x.to("emu"))
        torch.testing.assert_close(out.cpu(), f(bns["cpu"], x), **TOL)
        compiles.append(counter.frame_count)
    torch.testing.assert_close(bns["emu"].running_var.cpu(), bns["cpu"].running_var, **TOL)
    # The first call compiles (Dynamo may restart its analysis once, which
    # counts twice); the other batch sizes reuse that graph.
    assert compiles[0] >= 1 and compiles[1:] == [compiles[0]] * 2


def test_graph_breaks(baseline_memory, capsys):
    counter = CompileCounterWithBackend("inductor")

    def f(x):
        y = x.cos() + 1
        print("between graphs")
        scale = y.sum().item()  # leaves the graph too
        return (y / scale).exp()

    x = torch.randn(6)
    out = torch.compile(f, backend=counter)(x.to("emu"))
    # Three graphs: up to the print, from the print to .item(), after .item().
    assert counter.frame_count == 3
    assert "between graphs" in capsys.readouterr().out
    torch.testing.assert_close(out.cpu(), f(x), **TOL)
    torch.testing.assert_close(out, f(x.to("emu")), **TOL)


def test_device_index_change_recompiles(baseline_memory):
    counter = CompileCounterWithBackend("inductor")
    f = torch.compile(lambda x, y: (x * y).tanh() + torch.ones_like(x), backend=counter)
    x, y = torch.randn(10), torch.randn(10)
    for index in (0, 1):
        out = f(x.to(f"emu:{index}"), y.to(f"emu:{index}"))
        assert out.device == torch.device("emu", index)
        torch.testing.assert_close(out.cpu(), (x * y).tanh() + 1, **TOL)
    assert counter.frame_count == 2
    assert torch.emu.current_device() == 0


def test_autocast_in_compiled_region(baseline_memory):
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    x = torch.randn(4, 16)

    def f(model, x):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return F.relu(model(x)) + 1

    out = torch.compile(f)(to(lin, "emu"), x.to("emu"))
    assert out.dtype == torch.bfloat16 and out.device.type == "emu"
    bf16 = dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out.cpu(), f(to(lin, "emu"), x.to("emu")).cpu(), **bf16)
    torch.testing.assert_close(out.cpu(), f(lin, x), **bf16)


def test_max_autotune_no_cudagraphs(baseline_memory):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    model = to(mlp, "emu")
    x = torch.randn(8, 16)
    out = torch.compile(model, mode="max-autotune-no-cudagraphs")(x.to("emu"))
    torch.testing.assert_close(out, model(x.to("emu")), **TOL)
    torch.testing.assert_close(out.cpu(), mlp(x), **TOL)


def test_backend_named_emu(baseline_memory):
    """torch.compile(backend="emu"): listed by Dynamo, Inductor on emu, counts
    one graph, honours mode/options like backend="inductor"."""
    assert "emu" in torch._dynamo.list_backends()
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 4))
    model = to(mlp, "emu")
    x = torch.randn(8, 16)
    counter = CompileCounterWithBackend("emu")
    out, (code,) = run_and_get_code(torch.compile(model, backend=counter), x.to("emu"))
    assert counter.frame_count == 1 and out.device == torch.device("emu:0")
    assert "from torch_emu._C import _empty_strided, _launch" in code  # emu's wrapper, not CPU's
    torch.testing.assert_close(out.cpu(), mlp(x), **TOL)
    tuned = torch.compile(to(mlp, "emu"), backend="emu", mode="max-autotune-no-cudagraphs")(x.to("emu"))
    torch.testing.assert_close(tuned.cpu(), mlp(x), **TOL)
    with pytest.raises(Exception, match="not_a_config_key"):
        torch.compile(model, backend="emu", options={"not_a_config_key": 1})(x.to("emu"))
    del out, tuned


def test_custom_op_scaled_gelu(baseline_memory):
    import torch_emu_examples  # noqa: F401  (defines emu::scaled_gelu)

    def f(x):
        return torch.ops.emu.scaled_gelu(x * 2, 1.5).sum(dim=1)

    x = torch.randn(4, 6)
    xs = {"compiled": x.to("emu").requires_grad_(), "emu": x.to("emu").requires_grad_(), "cpu": x.clone().requires_grad_()}
    outs = {"compiled": torch.compile(f, fullgraph=True)(xs["compiled"]), "emu": f(xs["emu"]), "cpu": f(xs["cpu"])}
    for name, out in outs.items():
        out.sum().backward()
    for ref in ("emu", "cpu"):
        torch.testing.assert_close(outs["compiled"].cpu(), outs[ref].detach().cpu(), **TOL)
        torch.testing.assert_close(xs["compiled"].grad.cpu(), xs[ref].grad.cpu(), **TOL)


# --- device work: streams, strict mode, errors --------------------------------


@pytest.mark.launch_mode
def test_compiled_kernels_run_on_the_current_stream(baseline_memory):
    f = torch.compile(lambda x: x * 2 + 1)  # one generated kernel
    f(torch.zeros(4, device="emu"))  # compile before the timed part
    s = torch.emu.Stream()
    a = torch.randn(1024, 1024, device="emu")
    out = torch.zeros(1024, 1024, device="emu")
    expected = (a.cpu() @ a.cpu()) * 2 + 1
    busy = threading.Event()
    s.wait_stream(torch.emu.current_stream())  # out is zeroed on the current stream

    def producer():  # another host thread keeps s busy with matmuls into out
        with torch.emu.stream(s):
            busy.set()
            for _ in range(8):
                torch.mm(a, a, out=out)

    thread = threading.Thread(target=producer)
    thread.start()
    busy.wait()
    time.sleep(0.02)
    with torch.emu.stream(s):
        y = f(out)  # queued behind the matmuls on s; on any other stream it would run now
    thread.join()
    torch.emu.current_stream().wait_stream(s)  # y is written on s, read on this stream
    torch.testing.assert_close(y.cpu(), expected, rtol=1e-4, atol=1e-3)
    del a, out, y


# LITERALINCLUDE START: TEST_QUEUED_COMPILED_KERNEL
@pytest.mark.launch_mode
def test_generated_kernels_are_queued(baseline_memory):
    """A generated kernel launches as a GPU kernel does: behind a busy stream
    the call returns at once, and the kernel runs in stream order. Onto an
    idle stream it runs at once whatever its size (but in the queued mode)."""
    f = torch.compile(lambda x: (x * 2 + 1).relu())  # one generated kernel
    x = torch.randn(1 << 16, device="emu")  # 512 KiB read and written: queued by the cost rule
    f(x)
    torch.emu.synchronize()
    mode = torch_emu._C._launch_mode()
    before = torch_emu._C._launch_counts()
    f(x)
    expected = {"queued": (1, 0, 0), "blocking": (0, 0, 1)}.get(mode, (0, 1, 0))
    assert tuple(a - b for a, b in zip(torch_emu._C._launch_counts(), before)) == expected
    torch.emu.synchronize()
    clock_khz = torch.emu.get_device_properties().clock_rate or 1_000_000
    torch.emu._sleep(100 * clock_khz)  # 100 ms of device work ahead of it
    before = torch_emu._C._launch_counts()
    y = f(x)
    queued, at_once, waited = (a - b for a, b in zip(torch_emu._C._launch_counts(), before))
    if mode == "blocking":
        assert waited == 1 and torch.emu.current_stream().query()
    else:
        assert (queued, at_once, waited) == (1, 0, 0)
        assert not torch.emu.current_stream().query()  # still behind the sleep
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2 + 1).relu())
# LITERALINCLUDE END: TEST_QUEUED_COMPILED_KERNEL


@pytest.mark.launch_mode
def test_generated_kernels_replay_in_a_graph(baseline_memory):
    f = torch.compile(lambda x, w: (x @ w).sin() * 2 + x)  # an extern mm, a generated kernel
    x, w = torch.randn(8, 8, device="emu"), torch.randn(8, 8, device="emu")
    f(x, w)  # compiled outside the capture
    g = torch.emu.EmuGraph()
    with torch.emu.graph(g):
        out = f(x, w)
    for _ in range(2):
        new = torch.randn(8, 8)
        x.copy_(new)
        g.replay()
        torch.testing.assert_close(out.cpu(), (new @ w.cpu()).sin() * 2 + new, **TOL)
    del g, out


def test_queued_entry_point_takes_words_only():
    from torch_emu.compile.inductor import queued_entry

    code = queued_entry(["const float*", "float*", "const int64_t"])
    assert "reinterpret_cast<const float*>(args[0])" in code
    assert "static_cast<int64_t>(static_cast<int64_t>(args[2]))" in code
    assert queued_entry(["float*", "const float"]) == ""  # a float scalar keeps the Python entry


def test_strict_mode_subprocess():
    r = run_after_import(
        """
        import copy, torch, torch.nn as nn
        import torch_emu
        assert torch_emu._C._strict_mode()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        x = torch.randn(4, 8)
        net = copy.deepcopy(model).to("emu")
        out = torch.compile(net)(x.to("emu"))
        out.sum().backward()
        ref = model(x)
        ref.sum().backward()
        print(torch.allclose(out.cpu(), ref, atol=1e-5),
              torch.allclose(net[0].weight.grad.cpu(), model[0].weight.grad, atol=1e-5))
        """,
        TORCH_EMU_STRICT="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]


def test_device_mismatch_raises_like_eager(baseline_memory):
    def f(a, b):
        return (a + b).relu()

    a, b = torch.randn(4, device="emu"), torch.randn(4)
    with pytest.raises(RuntimeError) as eager:
        f(a, b)
    assert "same device" in str(eager.value)
    with pytest.raises(RuntimeError, match="same device"):
        torch.compile(f)(a, b)
    del a, b


# --- torch.export ------------------------------------------------------------


def test_export_runs_on_emu(baseline_memory):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    model, x = to(mlp, "emu"), torch.randn(5, 8)
    ep = torch.export.export(model, (x.to("emu"),))
    assert all(p.device.type == "emu" for p in ep.state_dict.values())
    out = ep.module()(x.to("emu"))
    assert out.device == torch.device("emu:0")
    torch.testing.assert_close(out, model(x.to("emu")), **TOL)
    torch.testing.assert_close(out.cpu(), mlp(x), **TOL)
    del ep, out, model
