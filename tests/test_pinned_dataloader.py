"""Pinned memory and data loading: asynchronous copies between pinned host
memory and emu, pinned-block lifetime, DataLoader(pin_memory=True) with and
without worker processes, and a prefetching training loop that matches CPU.

Asynchrony is shown with a *gate*, never with sleeps: a kernel that blocks
until the test releases it occupies stream A; stream B waits on an event
recorded on A behind it, so everything queued on B afterwards stays queued,
deterministically, until the gate opens.
"""

import copy
import threading
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

import _datasets
import torch_emu
from torch_emu.data import Prefetcher, to_device

pytestmark = pytest.mark.launch_mode

TIMEOUT = 60  # seconds; every wait in this file is bounded
N = 1 << 20
LAST = f"emu:{torch.emu.device_count() - 1}"  # emu:1 with the default two devices
two_devices = pytest.mark.skipif(torch.emu.device_count() < 2, reason="needs two emu devices")

# A test-only operator whose CPU kernel blocks until released. On an emu tensor
# it goes through the global fallback, i.e. it is a kernel running on the
# current stream of the thread that calls it.
_lib = torch.library.Library("emu_pinned_test", "DEF")
_lib.define("hold(Tensor x) -> Tensor")
_open_gate = []  # the Gate whose kernel is running (one at a time)


class Gate:
    """Keeps stream ``a`` busy (a blocking kernel on a helper thread) until
    ``open()``; ``block(s)`` makes stream ``s`` wait behind it."""

    def __init__(self, device: int = 0):
        self.device = device
        self.a = torch.emu.Stream(device=device)
        self.started, self.released = threading.Event(), threading.Event()
        self.error = []
        self._token = torch.zeros(1, device=f"emu:{device}")
        # The token's fill is queued on the current stream: wait for it, so the gate leaves
        # that stream idle and a test may assert so.
        torch.emu.current_stream(device).synchronize()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self.started.wait(TIMEOUT), "the gate kernel did not start"
        self.closed_at = self.a.record_event()  # completes only when the gate opens

    def _run(self):
        try:
            torch.emu.set_device(self.device)
            with torch.emu.stream(self.a):
                _open_gate[:] = [self]
                torch.ops.emu_pinned_test.hold(self._token)
        except BaseException as e:  # reported by open()
            self.error.append(e)
            self.started.set()

    def block(self, stream: torch.Stream) -> None:
        stream.wait_event(self.closed_at)

    def open(self) -> None:
        self.released.set()
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), "the gate kernel did not finish"
        self._token = None  # device memory back before baseline_memory checks it
        _open_gate.clear()
        assert not self.error, self.error


def _hold(x):
    gate = _open_gate[0]
    gate.started.set()
    gate.released.wait(TIMEOUT)
    return x.clone()


_lib.impl("hold", _hold, "CPU")


@pytest.fixture
def gate():
    gates = []

    def make(device: int = 0) -> Gate:
        gates.append(Gate(device))
        return gates[-1]

    yield make
    for g in gates:  # never leave a stream blocked, even when a test fails
        if not g.released.is_set():
            g.open()


def nonzero_on_device(t: torch.Tensor):
    """How many elements of emu tensor ``t`` are non-zero, read from the host
    without waiting for any stream; None in strict mode, where device memory
    cannot be read from the host."""
    if torch_emu._C._strict_mode():
        return None
    return torch.count_nonzero(torch_emu._C._host_alias(t)).item()


# ---------------------------------------------------------------------------
# Asynchronous copies and pinned-block lifetime


def test_pinned_h2d_non_blocking_is_async_on_current_stream(gate, baseline_memory):
    src = torch.full((N,), 7.0).pin_memory()
    dst = torch.zeros(N, device="emu")
    torch.emu.current_stream().synchronize()  # the zero fill is done: the current stream is idle by construction
    b = torch.emu.Stream()
    g = gate()
    g.block(b)
    with torch.emu.stream(b):
        before = b.record_event()
        dst.copy_(src, non_blocking=True)  # returns at once: b is held by the gate
        after = b.record_event()
    assert not before.query() and not after.query() and not b.query()
    assert nonzero_on_device(dst) in (0, None)  # not copied yet
    assert torch.emu.current_stream().query()  # other streams are unaffected
    g.open()
    after.synchronize()
    assert after.query()
    assert torch.equal(dst.cpu(), src)


def test_pinned_d2h_non_blocking_is_async(gate, baseline_memory):
    src = torch.arange(N, dtype=torch.float32, device="emu")
    dst = torch.zeros(N).pin_memory()
    b = torch.emu.Stream()
    b.wait_stream(torch.emu.current_stream())  # src is filled on the current stream
    g = gate()
    g.block(b)
    with torch.emu.stream(b):
        dst.copy_(src, non_blocking=True)
        done = b.record_event()
    assert not done.query()
    assert torch.count_nonzero(dst).item() == 0  # pinned host memory: readable, not written yet
    g.open()
    done.synchronize()
    assert torch.equal(dst, torch.arange(N, dtype=torch.float32))


def test_to_with_non_blocking_and_conversion(gate, baseline_memory):
    src = torch.arange(1000, dtype=torch.float64).pin_memory()
    b = torch.emu.Stream()
    g = gate()
    g.block(b)
    with torch.emu.stream(b):
        same = src.to("emu", non_blocking=True)  # pinned, flat: queued
        done = b.record_event()
    assert not done.query()
    g.open()
    b.synchronize()
    assert torch.equal(same.cpu(), src)
    # A dtype change converts on the host first (a pageable temporary): still correct.
    converted = src.to("emu", torch.float32, non_blocking=True)
    torch.emu.synchronize()
    assert converted.dtype == torch.float32 and torch.equal(converted.cpu(), src.float())


def test_pinned_source_not_reused_before_async_copy_ran(gate, baseline_memory):
    src = torch.full((N,), 3.0).pin_memory()
    ptr = src.data_ptr()
    dst = torch.zeros(N, device="emu")
    torch.emu.current_stream().synchronize()  # b does not wait for the zeros
    b = torch.emu.Stream()
    g = gate()
    g.block(b)
    with torch.emu.stream(b):
        dst.copy_(src, non_blocking=True)
    del src  # freed while the copy that reads it is still queued
    other = torch.empty(N).pin_memory()
    assert other.data_ptr() != ptr  # the block is held back by the copy's event
    other.fill_(-1.0)
    g.open()
    b.synchronize()
    assert torch.equal(dst.cpu(), torch.full((N,), 3.0))
    # Once the copy has run, the block is free for reuse (the cache works).
    again = torch.empty(N).pin_memory()
    assert again.data_ptr() == ptr
    del other, again


def test_pinned_destination_not_reused_before_async_copy_ran(gate, baseline_memory):
    src = torch.full((N,), 5.0, device="emu")
    torch.emu.current_stream().synchronize()  # b does not wait for the fill
    dst = torch.zeros(N).pin_memory()
    ptr = dst.data_ptr()
    b = torch.emu.Stream()
    g = gate()
    g.block(b)
    with torch.emu.stream(b):
        dst.copy_(src, non_blocking=True)
    del dst  # nobody reads the result, but the copy will still write it
    other = torch.zeros(N).pin_memory()
    assert other.data_ptr() != ptr
    g.open()
    b.synchronize()
    assert torch.count_nonzero(other).item() == 0  # the late copy did not land here


def test_pageable_copies_complete_when_the_call_returns(gate, baseline_memory):
    b = torch.emu.Stream()
    g = gate()
    g.block(b)
    src = torch.full((N,), 2.0)  # pageable
    dst = torch.zeros(N, device="emu")
    # The zeros are queued on the current stream, which b does not wait for (as
    # on CUDA): without this the copy could land before them.
    torch.emu.current_stream().synchronize()
    seen = {}

    def copy_on_b():
        with torch.emu.stream(b):
            dst.copy_(src, non_blocking=True)
        # On return, the copy (and everything queued on b before it) has run.
        seen["gate_event_done"] = g.closed_at.query()
        seen["stream_idle"] = b.query()
        seen["nonzero"] = nonzero_on_device(dst)
        src.fill_(-1.0)  # the caller may reuse pageable memory at once

    t = threading.Thread(target=copy_on_b)
    t.start()
    g.open()
    t.join(TIMEOUT)
    assert not t.is_alive()
    assert seen["gate_event_done"] and seen["stream_idle"] and seen["nonzero"] in (N, None)
    assert torch.equal(dst.cpu(), torch.full((N,), 2.0))
    # D2H into pageable memory: readable right after the call, no synchronize.
    host = torch.empty(N)
    with torch.emu.stream(b):
        host.copy_(dst * 3, non_blocking=True)
    assert torch.equal(host, torch.full((N,), 6.0))


@two_devices
def test_non_blocking_copy_to_another_device_uses_that_devices_stream(gate, baseline_memory):
    src = torch.full((N,), 4.0).pin_memory()
    torch.emu.synchronize(0)  # emu:0's current stream is idle by construction
    s1 = torch.emu.Stream(device=1)
    g = gate(device=1)
    g.block(s1)
    torch.emu.set_stream(s1)  # current stream of emu:1 ...
    torch.emu.set_device(0)  # ... while emu:0 is the current device
    try:
        dst = torch.empty(N, device="emu:1")
        dst.copy_(src, non_blocking=True)  # goes on emu:1's current stream, s1
        done = s1.record_event()
        assert not done.query()
        assert torch.emu.current_device() == 0
        assert torch.emu.current_stream(0).query()
    finally:
        g.open()
        torch.emu.set_stream(torch.emu.default_stream(1))
        torch.emu.set_device(0)
    torch.emu.synchronize(1)
    assert torch.equal(dst.cpu(), src)
    # emu:0 -> emu:1 (peer), non_blocking, then back to pinned host memory.
    x = torch.arange(N, dtype=torch.float32, device="emu:0")
    y = torch.empty(N, device="emu:1")
    y.copy_(x, non_blocking=True)
    back = torch.empty(N).pin_memory()
    back.copy_(y, non_blocking=True)
    torch.emu.synchronize(1)
    assert torch.equal(back, torch.arange(N, dtype=torch.float32))


def test_bad_inputs(baseline_memory):
    on_emu = torch.ones(4, device="emu")
    with pytest.raises(RuntimeError, match="cannot pin 'emuFloatType' only dense CPU tensors can be pinned"):
        on_emu.pin_memory()
    assert not on_emu.is_pinned()
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(4, device="emu", pin_memory=True)
    with pytest.raises(RuntimeError, match="CPU device type not an accelerator"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the device argument
            torch.ones(4).pin_memory("cpu")
    # DataLoader pins in the main process: a dataset yielding emu tensors fails there.
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        next(iter(DataLoader(_datasets.OnDevice("emu"), batch_size=2, pin_memory=True)))
    if torch.emu.device_count() >= 2:
        with pytest.raises(ValueError, match="copy stream is on emu:1"):
            Prefetcher([], "emu:0", stream=torch.emu.Stream(device=1))


# ---------------------------------------------------------------------------
# DataLoader(pin_memory=True)


def _loader(num_workers: int, **kwargs) -> DataLoader:
    if num_workers:
        kwargs.update(multiprocessing_context="spawn", timeout=TIMEOUT)
    return DataLoader(_datasets.Regression(48), batch_size=16, pin_memory=True,
                      num_workers=num_workers, **kwargs)


def _assert_pinned(batch):
    if isinstance(batch, torch.Tensor):
        assert batch.is_pinned() and batch.device.type == "cpu"
    elif isinstance(batch, dict):
        for v in batch.values():
            _assert_pinned(v)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            _assert_pinned(v)


def test_dataloader_pins_for_emu_in_main_process(baseline_memory):
    assert torch.accelerator.current_accelerator().type == "emu"
    loader = _loader(0)
    it = iter(loader)
    assert it._pin_memory and it._pin_memory_device == "emu"
    batches = list(it)
    assert len(batches) == 3
    for b in batches:
        _assert_pinned(b)
    dicts = list(DataLoader(_datasets.Dicts(4), batch_size=2, pin_memory=True))
    for d in dicts:
        _assert_pinned(d)
        assert d["name"] == [f"s{i}" for i in range(int(d["pair"][0][0]), int(d["pair"][0][0]) + 2)]
    unpinned = next(iter(DataLoader(_datasets.Regression(4), batch_size=4)))
    assert not unpinned[0].is_pinned()


def test_dataloader_two_spawned_workers_and_pin_thread(baseline_memory):
    reference = [(x.clone(), y.clone()) for x, y in _loader(0)]
    loader = _loader(2)
    it = iter(loader)
    try:
        assert it._pin_memory_device == "emu"
        assert it._pin_memory_thread.is_alive()
        got = list(it)
    finally:
        it._shutdown_workers()
    assert len(got) == len(reference)
    for (x, y), (rx, ry) in zip(got, reference):
        _assert_pinned((x, y))
        assert torch.equal(x, rx) and torch.equal(y, ry)
        # The pinned batches feed asynchronous copies.
        xe = x.to("emu", non_blocking=True)
        torch.emu.current_stream().synchronize()
        assert torch.equal(xe.cpu(), rx)


# ---------------------------------------------------------------------------
# Prefetching training loops: exactly the CPU result


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(_datasets.IN_FEATURES, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, _datasets.CLASSES))


def _train(model, batches, device):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches:
        assert x.device == torch.device(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [l.item() for l in losses], [p.detach().cpu() for p in model.parameters()]


def _epochs(loader, epochs=2):
    for _ in range(epochs):
        yield from loader


def _manual_prefetch(loader, device):
    """The usual pattern written out: non_blocking copies on a side stream,
    an event, and record_stream on the consumer stream."""
    side = torch.emu.Stream(device=device)
    nxt = None
    for x, y in loader:
        with torch.emu.stream(side):
            cur = (x.to(device, non_blocking=True), y.to(device, non_blocking=True), side.record_event())
        if nxt is not None:
            yield nxt
        consumer = torch.emu.current_stream(device)
        consumer.wait_event(cur[2])
        cur[0].record_stream(consumer)
        cur[1].record_stream(consumer)
        nxt = cur[:2]
    if nxt is not None:
        yield nxt


def test_prefetching_training_matches_cpu_exactly(baseline_memory):
    cpu_model = _model()
    emu_model = copy.deepcopy(cpu_model).to("emu")
    manual_model = copy.deepcopy(cpu_model).to(LAST)
    data = _datasets.Regression(96)

    def loader(**kw):  # same seed, same order on every run
        return DataLoader(data, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(1), **kw)

    cpu_losses, cpu_params = _train(cpu_model, Prefetcher(_epochs(loader()), "cpu"), "cpu")
    emu_losses, emu_params = _train(emu_model, Prefetcher(_epochs(loader(pin_memory=True)), "emu"), "emu:0")
    with torch.emu.device(LAST):
        man_losses, man_params = _train(manual_model, _manual_prefetch(_epochs(loader(pin_memory=True)), LAST), LAST)
    assert len(cpu_losses) == 12
    assert emu_losses == cpu_losses and man_losses == cpu_losses
    for c, e, m in zip(cpu_params, emu_params, man_params):
        assert torch.equal(c, e) and torch.equal(c, m)
    assert cpu_losses[-1] < cpu_losses[0]
    del emu_model, manual_model


def test_prefetcher_orders_consumer_after_copy(gate, baseline_memory):
    side = torch.emu.Stream()
    batches = [(torch.full((N,), float(i)).pin_memory(), {"k": torch.tensor([i]).pin_memory(), "s": "x"})
               for i in range(3)]
    g = gate()
    g.block(side)
    it = iter(Prefetcher(batches, "emu", stream=side))
    x0, extra = next(it)  # returns at once: the copy is only queued
    consumer = torch.emu.current_stream()
    ready = consumer.record_event()
    assert not ready.query()  # the consumer stream waits for the held copy
    assert x0.device == torch.device("emu:0") and extra["k"].device == x0.device and extra["s"] == "x"
    g.open()
    ready.synchronize()
    got = [(x0, extra)] + list(it)
    for i, (x, e) in enumerate(got):
        assert torch.equal(x.cpu(), torch.full((N,), float(i))) and torch.equal(e["k"].cpu(), torch.tensor([i]))
    assert len(Prefetcher(batches, "emu")) == 3
    del x0, extra, got


def test_prefetcher_cpu_and_to_device():
    batch = {"a": [torch.ones(2), (torch.zeros(1), 3)], "b": "text"}
    assert list(Prefetcher([batch], "cpu"))[0]["a"][1][1] == 3
    moved = to_device(batch, LAST)
    torch.emu.synchronize(LAST)
    assert moved["a"][0].device == torch.device(LAST) and moved["a"][1][1] == 3 and moved["b"] == "text"
