"""The Kineto activity profiler on emu (csrc/profiler/EmuKinetoProfiler.cpp,
csrc/runtime/trace.cpp): torch.profiler with
ProfilerActivity.PrivateUse1 gets the kernels and copies the runtime executed,
on a track per device and stream, linked to the ops that launched them."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

from _after_import import run_after_import

pytestmark = pytest.mark.launch_mode

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _trace(prof, tmp_path, name="trace.json"):
    path = tmp_path / name
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        return json.load(f)["traceEvents"]


def _device_events(events, cat):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == cat]


def _metadata(events, name):
    """{(pid, tid): args["name"]} of the thread_name / process_name records."""
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == name}


def test_plugin_is_registered():
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


def test_key_averages_have_device_time(baseline_memory):
    x = torch.randn(128, 128, device="emu")
    with profile(activities=ACTIVITIES) as prof:
        y = (x @ x).relu()
    averages = prof.key_averages()
    ops = {e.key: e for e in averages if e.cpu_time_total > 0}
    for name in ("aten::mm", "aten::relu"):
        assert ops[name].device_time_total > 0, name
    assert ops["aten::mm"].self_device_time_total > 0
    # A device-side kernel row carries the kernel's own time.
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert {"aten::mm", "aten::clamp_min"} <= {k.name for k in kernels}
    table = averages.table(row_limit=20)
    assert "Self EMU" in table and "EMU total" in table
    del x, y


def test_chrome_trace_tracks_and_correlation(tmp_path, baseline_memory):
    x = torch.randn(64, 64, device="emu")
    with profile(activities=ACTIVITIES) as prof:
        y = x @ x
    events = _trace(prof, tmp_path)
    kernels = [k for k in _device_events(events, "kernel") if k["name"] == "aten::mm"]
    assert len(kernels) == 1
    kernel = kernels[0]
    # The device is the pid, the stream the tid; both are named.
    stream = torch.emu.current_stream()
    assert kernel["pid"] == 0 and kernel["args"]["device"] == 0
    assert _metadata(events, "process_name")[(0, 0)] == "emu:0"
    assert _metadata(events, "thread_name")[(0, kernel["tid"])] == f"stream {kernel['args']['stream']}"
    assert kernel["dur"] > 0
    # Linked to the CPU op by Kineto's external correlation id...
    mm_ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    assert [op["args"]["External id"] for op in mm_ops] == [kernel["args"]["External id"]]
    op = mm_ops[0]
    # The kernel is queued by the op and runs after the launch (asynchronously,
    # it may end after the op has returned).
    assert op["ts"] <= kernel["ts"]
    # ... and to its launch call on the CPU thread by a flow arrow.
    launch = [e for e in _device_events(events, "privateuse1_runtime")
              if e["args"]["correlation"] == kernel["args"]["correlation"]]
    assert len(launch) == 1 and launch[0]["name"] == "emuLaunchKernel"
    assert launch[0]["ts"] <= kernel["ts"]
    assert launch[0]["tid"] == op["tid"]
    flows = {e["ph"]: e for e in events if e.get("cat") == "ac2g" and e["id"] == kernel["args"]["correlation"]}
    assert flows["s"]["tid"] == op["tid"] and (flows["f"]["pid"], flows["f"]["tid"]) == (0, kernel["tid"])
    del stream, x, y


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_copies_have_kind_and_bytes(tmp_path, dtype, baseline_memory):
    host = torch.ones(1000, dtype=dtype)
    with profile(activities=ACTIVITIES) as prof:
        dev = host.to("emu")
        back = dev.cpu()
    assert torch.equal(back, host)
    copies = _device_events(_trace(prof, tmp_path), "gpu_memcpy")
    nbytes = host.numel() * host.element_size()
    assert [(c["name"], c["args"]["bytes"]) for c in copies] == [("Memcpy HtoD", nbytes), ("Memcpy DtoH", nbytes)]
    del dev


def test_autograd_profiler_use_kineto(baseline_memory):
    # torch.autograd.profiler.profile(use_device="emu", use_kineto=True)
    # takes the plugin too (without use_kineto: the legacy stubs).
    x = torch.randn(32, 32, device="emu")
    with torch.autograd.profiler.profile(use_device="emu", use_kineto=True) as prof:
        x @ x
    assert prof.profiler_kind == torch.autograd.ProfilerState.KINETO_PRIVATEUSE1
    mm = [e for e in prof.key_averages() if e.key == "aten::mm" and e.cpu_time_total > 0]
    assert mm[0].device_time_total > 0
    del x


def test_record_function_and_backward(baseline_memory):
    w = torch.randn(32, 32, device="emu", requires_grad=True)
    with profile(activities=ACTIVITIES) as prof:
        with record_function("emu_step"):
            (w @ w).sum().backward()
    averages = {e.key: e for e in prof.key_averages() if e.cpu_time_total > 0}
    assert averages["emu_step"].device_time_total > 0
    backward = [k for k in averages if "MmBackward" in k]
    assert backward and averages[backward[0]].device_time_total > 0
    del w


def test_two_devices_and_side_stream(tmp_path, baseline_memory):
    if torch.emu.device_count() < 2:
        pytest.skip("needs TORCH_EMU_DEVICE_COUNT >= 2")
    x0 = torch.randn(32, 32, device="emu:0")
    x1 = torch.randn(32, 32, device="emu:1")
    side = torch.emu.Stream(device=0)
    with profile(activities=ACTIVITIES) as prof:
        x0 + x0
        with torch.emu.stream(side):
            x0 * x0
        x1 - x1
    torch.emu.synchronize()
    events = _trace(prof, tmp_path)
    tracks = {k["name"]: (k["pid"], k["tid"]) for k in _device_events(events, "kernel")}
    assert tracks["aten::add"][0] == tracks["aten::mul"][0] == 0 and tracks["aten::sub"][0] == 1
    assert tracks["aten::add"][1] != tracks["aten::mul"][1]  # the side stream's own track
    names = _metadata(events, "process_name")
    assert names[(0, 0)] == "emu:0" and names[(1, 0)] == "emu:1"
    threads = _metadata(events, "thread_name")
    assert all(track in threads for track in tracks.values())
    del x0, x1, side


def test_schedule_and_tensorboard_handler(tmp_path, baseline_memory):
    x = torch.randn(16, 16, device="emu")
    with profile(activities=ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for step in range(5):
            with record_function(f"step{step}"):
                x @ x
            prof.step()
    files = list(tmp_path.glob("*.pt.trace.json"))
    assert len(files) == 1
    with open(files[0]) as f:
        events = json.load(f)["traceEvents"]
    steps = {e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("step")}
    assert steps == {"step2", "step3"}  # the active steps only
    assert len([k for k in _device_events(events, "kernel") if k["name"] == "aten::mm"]) == 2
    del x


def test_compiled_kernels_are_device_activities(baseline_memory):
    @torch.compile(backend="inductor")
    def f(a):
        return (a.sin() + 1).relu()

    x = torch.randn(100, device="emu")
    f(x)  # compile outside the session
    with profile(activities=ACTIVITIES) as prof:
        y = f(x)
    torch.testing.assert_close(y.cpu(), (x.cpu().sin() + 1).relu())
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert any(n.startswith("cpp_fused") for n in names), names
    del x, y


def test_launch_binding_names_its_kernel(baseline_memory):
    from torch_emu._C import _launch

    x = torch.ones(4, device="emu")
    with profile(activities=ACTIVITIES) as prof:
        assert _launch(-1, lambda t: t.add_(1), x, name="my_generated_kernel") is x
        _launch(0, lambda: None)
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert names == ["my_generated_kernel", "inductor_kernel"]
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))
    with pytest.raises(TypeError, match="only the keyword argument 'name'"):
        _launch(-1, lambda: None, nmae="typo")
    del x


def test_no_records_outside_sessions(tmp_path, baseline_memory):
    x = torch.randn(16, 16, device="emu")
    with profile(activities=ACTIVITIES):
        x + x
    x * x  # not recorded, and must not reach the next session
    with profile(activities=[ProfilerActivity.CPU]) as cpu_only:
        x - x
    assert _device_events(_trace(cpu_only, tmp_path, "cpu.json"), "kernel") == []
    with profile(activities=ACTIVITIES) as prof:
        x - x
    assert [k["name"] for k in _device_events(_trace(prof, tmp_path), "kernel")] == ["aten::sub"]
    del x


def test_failing_op_inside_session(tmp_path, baseline_memory):
    x = torch.randn(4, 4, device="emu")
    with profile(activities=ACTIVITIES) as prof:
        with pytest.raises(RuntimeError, match="same device|device"):
            x + torch.randn(4, 4)  # emu tensor with a CPU tensor
        with pytest.raises(RuntimeError):
            x @ torch.randn(5, 5, device="emu")  # bad shapes
        x + x
    names = [k["name"] for k in _device_events(_trace(prof, tmp_path), "kernel")]
    assert "aten::add" in names
    with profile(activities=ACTIVITIES) as again:
        x * x
    assert [k["name"] for k in _device_events(_trace(again, tmp_path, "again.json"), "kernel")] == ["aten::mul"]
    del x


def test_benchmark_timer_synchronises_emu(baseline_memory):
    # torch.utils.benchmark's timer synchronises torch.accelerator, which is
    # emu: an asynchronous copy (pinned memory, side stream) is finished when
    # it returns.
    from torch.utils.benchmark.utils.timer import timer

    assert torch.accelerator.current_accelerator().type == "emu"
    src = torch.ones(16 << 20).pin_memory()
    dst = torch.empty(16 << 20, device="emu")
    side = torch.emu.Stream()
    with torch.emu.stream(side):
        dst.copy_(src, non_blocking=True)
    timer()
    assert side.query()
    measurement = torch.utils.benchmark.Timer("x @ x", globals={"x": dst[:4096].view(64, 64)}).timeit(3)
    assert measurement.median > 0
    del src, dst, side


def test_event_timing_agrees_with_profiler(baseline_memory):
    # The same kernel timed by a pair of timed events around it and by the
    # device trace: both are device-side times of one matmul (milliseconds).
    # The events bracket the kernel, so the traced time never exceeds the
    # event time; how much more the events measure is the stream's own work
    # between them, which a busy machine can stretch, so only the best of five
    # has to be close (no assertion on how the scheduler treated any one run).
    x = torch.randn(512, 512, device="emu")
    x @ x
    event_ms, profiler_ms = [], []
    for _ in range(5):
        start, end = torch.emu.Event(enable_timing=True), torch.emu.Event(enable_timing=True)
        with profile(activities=ACTIVITIES) as prof:
            start.record()
            x @ x
            end.record()
        end.synchronize()
        event_ms.append(start.elapsed_time(end))
        kernels = [e for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.PrivateUse1 and e.name == "aten::mm"]
        assert len(kernels) == 1
        profiler_ms.append(kernels[0].device_time_total / 1000)
    del x
    rounding_ms = 0.002  # the trace keeps whole microseconds
    assert all(0 < t <= e + rounding_ms for e, t in zip(event_ms, profiler_ms)), (event_ms, profiler_ms)
    assert max(t / e for e, t in zip(event_ms, profiler_ms)) >= 0.5, (event_ms, profiler_ms)


def test_plot_trace_draws_a_row_per_stream(tmp_path, baseline_memory):
    x = torch.randn(32, 32, device="emu")
    side = torch.emu.Stream()
    with profile(activities=ACTIVITIES) as prof:
        x @ x
        with torch.emu.stream(side):
            x.to("emu", copy=True)
    torch.emu.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    svg = tmp_path / "timeline.svg"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_trace.py"), str(trace), str(svg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    root = ET.parse(svg).getroot()
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    stream_rows = [t for t in labels if t and t.startswith("emu:0 stream")]
    assert len(stream_rows) == 2, labels
    assert any(t and t.startswith("CPU thread") for t in labels)
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_trace.py"), str(svg), str(svg)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "not a Chrome trace" in bad.stderr
    del x, side


def test_zero_cost_switch_in_a_fresh_process():
    # Nothing is recorded before a session starts, and the recording stops
    # with it: a fresh process profiles twice and sees only its own kernels.
    r = run_after_import(
        """
        import torch
        from torch.profiler import profile, ProfilerActivity
        x = torch.randn(8, 8, device="emu")
        for op in (torch.add, torch.mul):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
                op(x, x)
            print(sorted(e.name for e in p.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1))
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["['aten::add']", "['aten::mul']"]
