"""torch.profiler records the device's kernels with device times, user labels, and a loadable Chrome trace."""

import json
import os
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile, record_function

TIER = "profiler"
CHAPTER = "profiler"
ORDER = 120


def profiled(dev):
    x = torch.randn(64, 64, device=dev)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        with record_function("conformance_label"):
            y = (x @ x).relu().sum()
        torch.accelerator.synchronize()
    assert y.device.type == dev
    return prof


def check_device_events(dev):
    """ProfilerActivity.PrivateUse1 records device-side events for the ops that ran on the device."""
    events = profiled(dev).events()
    device_events = [e for e in events if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert device_events, "no event has device_type PrivateUse1"
    assert any("mm" in e.name for e in device_events), sorted({e.name for e in device_events})


def check_device_time(dev):
    """key_averages gives the matmul a positive device time."""
    averages = profiled(dev).key_averages()
    mm = [a for a in averages if a.key in ("aten::mm", "aten::matmul")]
    assert mm and max(a.device_time_total for a in mm) > 0, [(a.key, a.device_time_total) for a in mm]


def check_record_function(dev):
    """A record_function label appears among the profiled events."""
    assert any(e.name == "conformance_label" for e in profiled(dev).events())


def check_chrome_trace(dev):
    """export_chrome_trace writes JSON whose events include the label and the matmul."""
    prof = profiled(dev)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "conformance_label" in names, "the label is not in the trace"
    assert any("mm" in (n or "") for n in names), "the matmul is not in the trace"
