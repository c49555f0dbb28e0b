"""Memory debugging as torch.cuda.memory has it: allocation history with
Python frames, snapshots in CUDA's format rendered by torch.cuda._memory_viz,
and emu allocations in torch.profiler(profile_memory=True)."""

import base64
import json
import pickle
import re
import subprocess
import sys

import pytest
import torch
from torch.cuda import _memory_viz

pytestmark = pytest.mark.launch_mode

MiB = 1 << 20


@pytest.fixture
def history():
    torch.emu.memory._record_memory_history(max_entries=10000)
    try:
        yield
    finally:
        torch.emu.memory._record_memory_history(enabled=None)


def _allocate_for_history(n):
    return torch.empty(n, dtype=torch.uint8, device="emu")


def _names(frames):
    return {f["name"] for f in frames}


def _entries(snapshot, device=0):
    return snapshot["device_traces"][device]


def test_trace_has_alloc_and_free_with_python_frames(baseline_memory, history):
    x = _allocate_for_history(3 * MiB)
    address = x.data_ptr()
    del x
    trace = _entries(torch.emu.memory._snapshot())
    mine = [e for e in trace if e.get("addr") == address]
    actions = [e["action"] for e in mine]
    assert actions[-3:] == ["alloc", "free_requested", "free_completed"]
    alloc = mine[-3]
    assert alloc["size"] == 3 * MiB
    assert "_allocate_for_history" in _names(alloc["frames"])
    assert any(f["filename"].endswith("test_memory_history.py") for f in alloc["frames"])
    assert "test_trace_has_alloc_and_free_with_python_frames" in _names(mine[-2]["frames"])  # context="all"
    assert all(isinstance(e["time_us"], int) and e["time_us"] > 0 for e in trace)
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)


def test_segment_events_and_snapshot_state(baseline_memory, history):
    torch.emu.empty_cache()
    x = _allocate_for_history(25 * MiB)  # its own segment
    segments = torch.emu.memory_snapshot()
    seg = next(s for s in segments if s["address"] == x.data_ptr())
    assert seg["device"] == 0 and seg["segment_type"] == "large" and seg["total_size"] >= 25 * MiB
    block = seg["blocks"][0]
    assert block["state"] == "active_allocated" and block["size"] >= 25 * MiB
    assert block["requested_size"] == 25 * MiB
    assert "_allocate_for_history" in _names(block["frames"])
    assert seg["allocated_size"] == block["size"]
    del x
    torch.emu.empty_cache()
    actions = [(e["action"], e["addr"]) for e in _entries(torch.emu.memory._snapshot())]
    assert ("segment_alloc", seg["address"]) in actions
    assert ("segment_free", seg["address"]) in actions
    assert all(s["address"] != seg["address"] for s in torch.emu.memory_snapshot())


def test_inactive_blocks_and_other_device(baseline_memory, history):
    if torch.emu.device_count() < 2:
        pytest.skip("needs two emu devices")
    a = torch.empty(1000, device="emu:1")
    b = torch.empty(1000, device="emu:1")
    del a
    snapshot = torch.emu.memory._snapshot()
    seg = next(s for s in snapshot["segments"] if s["device"] == 1 and
               any(bl["address"] == b.data_ptr() for bl in s["blocks"]))
    states = {bl["state"] for bl in seg["blocks"]}
    assert "inactive" in states and "active_allocated" in states
    assert sum(bl["size"] for bl in seg["blocks"]) == seg["total_size"]
    assert any(e["addr"] == b.data_ptr() for e in _entries(snapshot, 1) if e["action"] == "alloc")


def test_max_entries_keeps_the_latest(baseline_memory):
    torch.emu.memory._record_memory_history(max_entries=4)
    try:
        xs = [torch.empty(100, device="emu") for _ in range(6)]
        trace = _entries(torch.emu.memory._snapshot())
        assert len(trace) == 4
        assert trace[-1]["addr"] == xs[-1].data_ptr()
        torch.emu.memory._record_memory_history(max_entries=2)  # shrinking keeps the latest
        assert _entries(torch.emu.memory._snapshot()) == trace[-2:]
        del xs
    finally:
        torch.emu.memory._record_memory_history(enabled=None)


def test_clear_history_and_skip_actions(baseline_memory):
    torch.emu.memory._record_memory_history(max_entries=100)
    try:
        x = torch.empty(100, device="emu")
        assert len(_entries(torch.emu.memory._snapshot())) >= 1
        # Calling again keeps the history unless asked to clear it.
        torch.emu.memory._record_memory_history(max_entries=100, skip_actions=["free_requested", "segment_alloc"])
        assert any(e["addr"] == x.data_ptr() for e in _entries(torch.emu.memory._snapshot()))
        torch.emu.memory._record_memory_history(max_entries=100, clear_history=True,
                                                skip_actions=["free_requested", "segment_alloc"])
        assert _entries(torch.emu.memory._snapshot()) == []
        del x
        y = torch.empty(100, device="emu")
        assert [e["action"] for e in _entries(torch.emu.memory._snapshot())] == ["free_completed", "alloc"]
        del y
    finally:
        torch.emu.memory._record_memory_history(enabled=None)


def test_context_levels_and_stop(baseline_memory):
    torch.emu.memory._record_memory_history(context="alloc", stacks="python")
    try:
        x = _allocate_for_history(1000)
        del x
        trace = _entries(torch.emu.memory._snapshot())
        assert _names(trace[-3]["frames"]) and not trace[-2]["frames"]  # free: no frames at "alloc"
    finally:
        torch.emu.memory._record_memory_history(enabled=None)
    assert _entries(torch.emu.memory._snapshot()) == []  # stopping drops the history
    torch.emu.memory._record_memory_history(enabled="state")
    try:
        y = _allocate_for_history(1000)
        snapshot = torch.emu.memory._snapshot()
        assert _entries(snapshot) == []  # "state": no trace, but live blocks know where they came from
        block = next(bl for s in snapshot["segments"] for bl in s["blocks"] if bl["address"] == y.data_ptr())
        assert "_allocate_for_history" in _names(block["frames"])
        del y
    finally:
        torch.emu.memory._record_memory_history(enabled=None)


def test_cpp_stacks(baseline_memory):
    torch.emu.memory._record_memory_history(stacks="all")
    try:
        x = _allocate_for_history(1000)
        frames = _entries(torch.emu.memory._snapshot())[-1]["frames"]
        assert "_allocate_for_history" in _names(frames)
        assert len(frames) > 10  # C++ frames as well
        del x
    finally:
        torch.emu.memory._record_memory_history(enabled=None)


def test_no_history_when_off(baseline_memory):
    x = torch.empty(1000, device="emu")
    snapshot = torch.emu.memory._snapshot()
    assert snapshot["device_traces"] and all(t == [] for t in snapshot["device_traces"])
    block = next(bl for s in snapshot["segments"] for bl in s["blocks"] if bl["address"] == x.data_ptr())
    assert block["frames"] == []


def _decode_viz(html):
    match = re.search(r'"base64": "([^"]+)"', html)
    return pickle.loads(base64.b64decode(match.group(1)))


def test_memory_viz_renders_emu_snapshot(baseline_memory, history, tmp_path):
    keep = _allocate_for_history(2 * MiB)
    gone = _allocate_for_history(MiB)
    del gone
    path = tmp_path / "snap.pickle"
    torch.emu.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    assert any(s["address"] <= keep.data_ptr() < s["address"] + s["total_size"] for s in snapshot["segments"])
    # PyTorch's own viewer, as a user runs it.
    out = tmp_path / "out.html"
    result = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    html = out.read_text()
    assert "Active Memory Timeline" in html
    embedded = _decode_viz(html)
    assert any("_allocate_for_history" in _names(e["frames"]) for e in embedded["device_traces"][0])
    assert "Active Cached Memory Timeline" in _memory_viz.trace_plot(snapshot, plot_segments=True)
    assert _decode_viz(_memory_viz.segment_plot(snapshot))["segments"] == snapshot["segments"]
    # The text reports walk segments, blocks and their frames (flame graph
    # lines, returned as text instead of being drawn).
    assert "_allocate_for_history" in _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    assert "_allocate_for_history" in _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "cudaMalloc" in _memory_viz.trace(snapshot)  # the viewer's word for a segment allocation
    assert "20.0MiB allocated" in _memory_viz.segsum(snapshot)
    del keep


def test_profile_memory_shows_emu_allocations(baseline_memory, tmp_path):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x = torch.empty(MiB, dtype=torch.uint8, device="emu")
        del x
    empty = next(e for e in prof.key_averages() if e.key == "aten::empty")
    assert empty.device_memory_usage == MiB
    assert empty.cpu_memory_usage == 0
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "[memory]"]
    emu = [e["args"] for e in events if e["args"]["Device Type"] == int(torch._C._autograd.DeviceType.PrivateUse1)]
    assert [a["Bytes"] for a in emu] == [MiB, -MiB]
    assert all(a["Device Id"] == 0 for a in emu)


def test_bad_inputs():
    with pytest.raises(RuntimeError, match="enabled must be"):
        torch.emu.memory._record_memory_history(enabled="everything")
    with pytest.raises(RuntimeError, match="context must be"):
        torch.emu.memory._record_memory_history(context="sometimes")
    with pytest.raises(RuntimeError, match="stacks must be"):
        torch.emu.memory._record_memory_history(stacks="cpp")
    with pytest.raises(ValueError, match=r"max_entries must be a whole number from 0 to 2\*\*63-1, got -1"):
        torch.emu.memory._record_memory_history(max_entries=-1)
    with pytest.raises(ValueError, match=r"max_entries must be a whole number from 0 to 2\*\*63-1, got 1.5"):
        torch.emu.memory._record_memory_history(max_entries=1.5)
    count = torch.emu.device_count()
    # As memory_stats(device=count): the device is checked although the history covers every device.
    with pytest.raises(torch.AcceleratorError, match=f"Invalid device emu:{count}: there are {count} emu devices"):
        torch.emu.memory._record_memory_history(device=count)
    with pytest.raises(torch.AcceleratorError, match=f"Invalid device emu:{count}: there are {count} emu devices"):
        torch.emu.memory._snapshot(device=count)
    with pytest.raises(ValueError, match="emu device"):
        torch.emu.memory._record_memory_history(device="cpu")
    with pytest.raises(RuntimeError, match="Unknown TraceEntry action: frees"):
        torch.emu.memory._record_memory_history(skip_actions=["frees"])
    with pytest.raises(NotImplementedError, match="compile context"):
        torch.emu.memory._record_memory_history(compile_context=True)
    assert all(t == [] for t in torch.emu.memory._snapshot()["device_traces"])
