"""Streams and events: pools, priorities, ordering across streams, timing."""

import time

import pytest
import torch

pytestmark = pytest.mark.launch_mode


def test_default_and_current_stream():
    s = torch.emu.current_stream()
    assert s == torch.emu.default_stream()
    assert s.stream_id == 0 and s.device == torch.device("emu:0")
    assert torch.emu.default_stream(1).device == torch.device("emu:1")
    assert torch.accelerator.current_stream() == s


def test_pool_streams_and_priorities():
    low, high = torch.emu.Stream(), torch.emu.Stream(priority=-1)
    assert low.priority == 0 and high.priority == -1
    assert low != high and low.stream_id != 0
    plain = torch.Stream(device="emu")  # PyTorch's own class works too
    assert plain.device.type == "emu"
    assert torch.emu.Stream(device=1).device == torch.device("emu:1")


def test_stream_context_sets_and_restores():
    s = torch.emu.Stream(device=1)
    with torch.emu.stream(s):
        assert torch.emu.current_stream(1) == s
        assert torch.emu.current_device() == 1
    assert torch.emu.current_device() == 0
    assert torch.emu.current_stream(1) == torch.emu.default_stream(1)
    with torch.emu.stream(None):
        pass
    with s:  # torch.Stream's own context manager
        assert torch.accelerator.current_stream(1) == s
    torch.emu.set_stream(s)
    assert torch.emu.current_stream() == s and torch.emu.current_device() == 1
    torch.emu.set_stream(torch.emu.default_stream(1))  # leave emu:1's current stream as found
    torch.emu.set_stream(torch.emu.default_stream(0))
    assert torch.emu.current_device() == 0


def test_work_follows_current_stream_and_events_order_streams():
    a, b = torch.emu.Stream(), torch.emu.Stream()
    x = torch.zeros(1 << 20, device="emu")
    pinned = torch.full((1 << 20,), 3.0).pin_memory()
    a.wait_stream(torch.emu.current_stream())  # x is zeroed on the current stream
    with torch.emu.stream(a):
        x.copy_(pinned, non_blocking=True)  # async H2D on stream a
        done = torch.emu.Event()
        done.record()
    b.wait_event(done)
    with torch.emu.stream(b):
        y = x * 2  # must see the copy because b waited on a's event
    b.synchronize()
    assert torch.equal(y.cpu(), torch.full((1 << 20,), 6.0))
    assert done.query() and a.query()


def test_wait_stream_orders_many_async_copies():
    copies = torch.emu.Stream()
    hosts = [torch.full((1 << 18,), float(i)).pin_memory() for i in range(8)]
    devs = [torch.empty(1 << 18, device="emu") for _ in range(8)]
    with torch.emu.stream(copies):
        for h, d in zip(hosts, devs):
            d.copy_(h, non_blocking=True)
    torch.emu.current_stream().wait_stream(copies)
    total = torch.stack(devs).sum(dim=1)
    expected = torch.tensor([float(i) * (1 << 18) for i in range(8)])
    assert torch.equal(total.cpu(), expected)


def test_event_timing():
    start, end = torch.emu.Event(enable_timing=True), torch.emu.Event(enable_timing=True)
    start.record()
    x = torch.randn(512, 512, device="emu")
    for _ in range(5):
        x = x @ x / 512
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0
    assert start.query() and end.query()
    assert isinstance(start, torch.emu.Event) and not isinstance(torch.Event(device="cpu"), torch.emu.Event)


def test_event_timing_disabled_is_an_error():
    a, b = torch.emu.Event(), torch.emu.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)


def test_elapsed_time_between_devices_is_an_error_as_on_cuda(baseline_memory):
    # cudaEventElapsedTime fails with cudaErrorInvalidResourceHandle for events of two devices.
    start, end = torch.emu.Event(enable_timing=True), torch.emu.Event(enable_timing=True)
    start.record(torch.emu.current_stream(0))
    end.record(torch.emu.current_stream(1))
    end.synchronize()
    start.synchronize()
    with pytest.raises(torch.AcceleratorError, match="emuErrorInvalidResourceHandle.*start event was recorded on "
                                                     "emu:0 and the end event on emu:1; both must be recorded on "
                                                     "the same device"):
        start.elapsed_time(end)
    same_device = torch.emu.Event(enable_timing=True)
    same_device.record(torch.emu.current_stream(0))
    same_device.synchronize()
    assert start.elapsed_time(same_device) >= 0


def test_unrecorded_event_semantics():
    e = torch.emu.Event()
    assert e.query()
    e.synchronize()
    torch.emu.current_stream().wait_event(e)  # no-op
    timed = torch.emu.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(torch.emu.Event(enable_timing=True))


def test_torch_event_and_stream_api():
    s = torch.Stream(device="emu:1")
    e = s.record_event()
    assert isinstance(e, torch.Event)
    e.synchronize()
    assert s.query()
    s.synchronize()


def test_record_stream_defers_reuse():
    side = torch.emu.Stream()
    x = torch.ones(1 << 16, device="emu")
    side.wait_stream(torch.emu.current_stream())  # x is the current stream's result
    with torch.emu.stream(side):
        y = x * 3
    x.record_stream(side)
    y.record_stream(torch.emu.current_stream())
    del x
    side.synchronize()
    assert torch.equal(y.cpu(), torch.full((1 << 16,), 3.0))


def test_synchronize_honours_device_argument():
    s = torch.emu.Stream(device=1)
    host = torch.ones(1 << 20).pin_memory()
    with torch.emu.stream(s):
        d = host.to("emu:1", non_blocking=True)
    torch.emu.synchronize(1)
    assert s.query()
    assert d.sum().item() == float(1 << 20)


def test_events_cross_devices():
    s0, s1 = torch.emu.Stream(device=0), torch.emu.Stream(device=1)
    with torch.emu.stream(s0):
        x = torch.arange(1000.0, device="emu:0") * 2
        e = torch.emu.Event()
        e.record(s0)
    s1.wait_event(e)
    with torch.emu.stream(s1):
        y = x.to("emu:1") + 1
    s1.synchronize()
    assert torch.equal(y.cpu(), torch.arange(1000.0) * 2 + 1)


def test_bad_stream_inputs():
    with pytest.raises(ValueError, match="emu stream"):
        torch.emu.set_stream(torch.Stream(device="cpu"))
    with pytest.raises(RuntimeError, match="emu:9"):
        torch.emu.Stream(device=9)
    with pytest.raises(NotImplementedError, match="interprocess"):
        torch.emu.Event(interprocess=True)


def test_many_threads_submit_concurrently():
    import threading

    errors = []

    def work(i):
        try:
            s = torch.emu.Stream()
            with torch.emu.stream(s):
                a = torch.full((256,), float(i), device="emu")
                for _ in range(50):
                    a = a + 1
                s.synchronize()
                assert a[0].item() == i + 50
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)


def test_a_completed_event_and_its_stream_agree():
    # The event completes as its stream finishes the record, under the
    # stream's lock: after synchronizing on either, both report done (the
    # record used to complete first, and s.query() was False a quarter of
    # the time right after e.synchronize()).
    x = torch.randn(64, 64, device="emu")
    for _ in range(200):
        s = torch.emu.Stream()
        with torch.emu.stream(s):
            y = x @ x
            e = torch.emu.Event()
            e.record()
        e.synchronize()
        assert e.query() and s.query()
        with torch.emu.stream(s):
            y = y @ x
            e.record()
        s.synchronize()
        assert e.query()
    del x, y
