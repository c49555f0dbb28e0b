"""Streams order work, events record and time it, and cross-stream waits and record_stream are honoured."""

import torch

TIER = "streams"
CHAPTER = "streams_events"
ORDER = 30


def check_stream_objects(dev):
    """torch.Stream on the device; the current stream is a stream of the device; a stream context switches it."""
    s = torch.Stream(device=dev)
    assert s.device.type == dev
    current = torch.accelerator.current_stream()
    assert current.device.type == dev
    with s:
        assert torch.accelerator.current_stream() == s
    assert torch.accelerator.current_stream() == current


def check_event_record_and_query(dev):
    """An event recorded after work completes after synchronize; query and stream.query agree."""
    s = torch.Stream(device=dev)
    with s:
        x = torch.randn(256, 256, device=dev)
        y = x @ x
        e = torch.Event(device=dev)
        e.record()
    e.synchronize()
    assert e.query() and s.query()
    assert torch.allclose(y.cpu(), x.cpu() @ x.cpu(), atol=1e-4, rtol=1e-4)


def check_event_timing(dev):
    """Two timing events give a non-negative elapsed_time."""
    start, end = torch.Event(device=dev, enable_timing=True), torch.Event(device=dev, enable_timing=True)
    start.record()
    x = torch.randn(128, 128, device=dev)
    for _ in range(5):
        x = x @ x / 128
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0


def check_wait_stream_orders(dev):
    """Work on a second stream after wait_stream sees the first stream's results."""
    s1, s2 = torch.Stream(device=dev), torch.Stream(device=dev)
    a = torch.randn(512, 512)
    with s1:
        x = a.to(dev, non_blocking=True)
        y = (x @ x).relu()
    s2.wait_stream(s1)
    with s2:
        z = y.sum(dim=0)
    s2.synchronize()
    assert torch.allclose(z.cpu(), (a @ a).relu().sum(dim=0), atol=1e-2, rtol=1e-4)


def check_event_wait_across_streams(dev):
    """stream.wait_event makes a stream wait for an event of another stream."""
    s1, s2 = torch.Stream(device=dev), torch.Stream(device=dev)
    with s1:
        x = torch.full((1000,), 3.0, device=dev)
        e = s1.record_event()
    s2.wait_event(e)
    with s2:
        total = x.sum()
        assert total.item() == 3000.0  # .item() copies on the current stream: s2 here


def check_record_stream(dev):
    """A tensor used on another stream and marked with record_stream is freed safely; memory returns."""
    torch.accelerator.synchronize()
    before = torch.accelerator.memory_allocated()
    s = torch.Stream(device=dev)
    x = torch.ones(1 << 20, device=dev)
    s.wait_stream(torch.accelerator.current_stream())  # x is the current stream's result
    with s:
        y = x * 2
    x.record_stream(s)
    del x
    torch.accelerator.current_stream().wait_stream(s)  # y is s's result
    assert y.sum().item() == 2 * (1 << 20)
    del y
    torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() == before
