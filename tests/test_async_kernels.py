"""Asynchronous kernels: a launch returns before its kernel runs, as on a GPU.

These tests show the classic stream bugs behaving on emu as they do on CUDA
(so that emu finds them in users' code), errors of queued kernels surfacing at
the next synchronisation, and TORCH_EMU_LAUNCH_BLOCKING=1 turning it all off.
The slow kernel that makes them deterministic is torch.emu._sleep.
"""

import contextlib
import os
import re
import subprocess
import sys
import time

import pytest
import torch
from conftest import native_runtime_only
from _after_import import run_after_import

import torch_emu

pytestmark = [
    pytest.mark.skipif(torch_emu._C._launch_mode() == "blocking",
                       reason="TORCH_EMU_LAUNCH_BLOCKING=1: kernels run synchronously"),
    pytest.mark.launch_mode,
]

N = 1 << 16


def sleep_ms(ms: float) -> None:
    """Queues a kernel on the current stream that keeps it busy for `ms`."""
    clock_khz = torch.emu.get_device_properties().clock_rate or 1_000_000
    torch.emu._sleep(int(ms * clock_khz))


# LITERALINCLUDE START: TEST_LAUNCH_RETURNS
def test_launch_returns_before_the_kernel_runs(baseline_memory):
    x = torch.zeros(N, device="emu")
    sleep_ms(300)
    x.add_(1)  # queued behind the sleep
    assert not torch.emu.current_stream().query()  # the host is ahead of the device
    torch.emu.synchronize()
    assert torch.emu.current_stream().query()
    assert x.cpu().eq(1).all()
# LITERALINCLUDE END: TEST_LAUNCH_RETURNS


# LITERALINCLUDE START: TEST_WAIT_STREAM
def producer_consumer(wait: bool) -> torch.Tensor:
    x = torch.zeros(N, device="emu")
    torch.emu.synchronize()
    side = torch.emu.Stream()
    with torch.emu.stream(side):
        sleep_ms(300)  # a long kernel on the producer
        x.add_(1)
    if wait:
        torch.emu.current_stream().wait_stream(side)
    y = x * 2  # the consumer, on the current stream
    torch.emu.synchronize()
    return y.cpu()


def test_missing_wait_stream_reads_stale_data(baseline_memory):
    # The consumer ran while the producer was still busy: it read zeros.
    assert producer_consumer(wait=False).eq(0).all()


def test_wait_stream_orders_consumer_after_producer(baseline_memory):
    assert producer_consumer(wait=True).eq(2).all()
# LITERALINCLUDE END: TEST_WAIT_STREAM


# LITERALINCLUDE START: TEST_RECORD_STREAM
def side_stream_read_then_free(record: bool):
    x = torch.ones(N, device="emu")  # allocated on the current stream
    torch.emu.synchronize()
    ptr = x.data_ptr()
    side = torch.emu.Stream()
    with torch.emu.stream(side):
        sleep_ms(300)
        y = x * 2  # reads x later, on the side stream
    if record:
        x.record_stream(side)
    del x  # without record_stream its block is free for the current stream at once
    z = torch.full((N,), 7.0, device="emu")  # runs now: the current stream is idle
    torch.emu.synchronize()
    return y.cpu(), z.data_ptr() == ptr


def test_missing_record_stream_lets_the_allocator_reuse_memory_in_use(baseline_memory):
    y, reused = side_stream_read_then_free(record=False)
    assert reused
    assert y.eq(14).all()  # the side stream read z's sevens, not x's ones


def test_record_stream_keeps_the_block_until_the_side_stream_is_done(baseline_memory):
    y, reused = side_stream_read_then_free(record=True)
    assert not reused
    assert y.eq(2).all()
# LITERALINCLUDE END: TEST_RECORD_STREAM


# LITERALINCLUDE START: TEST_HOST_TIMING
def test_host_timing_without_synchronize_sees_only_the_launch(baseline_memory):
    start, end = torch.emu.Event(enable_timing=True), torch.emu.Event(enable_timing=True)
    start.record()
    sleep_ms(200)
    end.record()
    # A host clock read now would stop before the work: it is still queued.
    assert not end.query()
    end.synchronize()
    assert start.elapsed_time(end) >= 180  # the device's own clock saw it all
# LITERALINCLUDE END: TEST_HOST_TIMING


# LITERALINCLUDE START: TEST_QUEUED_ERROR
def test_error_in_a_queued_kernel_surfaces_at_the_next_sync(baseline_memory):
    src = torch.arange(6.0, device="emu").view(2, 3)
    bad = torch.tensor([[0, 5, 1]], device="emu")  # 5 is out of range for dim 1 of 3
    sleep_ms(100)
    out = src.gather(1, bad)  # returns: the kernel has not run yet
    with pytest.raises(torch.AcceleratorError, match=r"gather.*out of bounds"):
        torch.emu.synchronize()
    del out
    torch.emu.synchronize()  # reported once: the device stays usable
    assert (src + 1).cpu().equal(torch.arange(1.0, 7.0).view(2, 3))
# LITERALINCLUDE END: TEST_QUEUED_ERROR


def test_error_surfaces_at_a_copy_to_the_host(baseline_memory):
    src = torch.arange(6.0, device="emu").view(2, 3)
    index = torch.tensor([[0, 7, 1]], device="emu")  # a pageable copy: it waits for the stream
    sleep_ms(100)
    out = src.gather(1, index)
    with pytest.raises(torch.AcceleratorError, match="out of bounds"):
        out.cpu()
    del out


def test_stream_synchronize_reports_only_its_own_errors(baseline_memory):
    side = torch.emu.Stream()
    src = torch.arange(6.0, device="emu").view(2, 3)
    torch.emu.synchronize()
    index = torch.tensor([[0, 9, 1]], device="emu")
    with torch.emu.stream(side):
        sleep_ms(100)
        bad = src.gather(1, index)
    torch.emu.current_stream().synchronize()  # nothing failed here
    with pytest.raises(torch.AcceleratorError, match="out of bounds"):
        side.synchronize()
    del bad


# LITERALINCLUDE START: TEST_QUEUED_DRAWS
def _draws(device, busy):
    """Random ops between seeding and state reads: busy() keeps emu's stream
    busy, so that each random kernel is queued behind it."""
    rng = torch.emu if device == "emu" else torch.random
    rng.manual_seed(1)
    g = torch.Generator(device).manual_seed(5)
    busy()
    out = [torch.randn(64, device=device), torch.randint(0, 9, (100,), device=device, generator=g)]
    state = rng.get_rng_state()  # waits for the queued draws
    out.append(torch.rand(10, device=device))
    rng.set_rng_state(state)
    out.append(torch.rand(10, device=device))  # the same numbers again
    busy()
    out.append(torch.empty(8, device=device).normal_())
    side = torch.emu.Stream() if device == "emu" else None
    with torch.emu.stream(side) if side is not None else contextlib.nullcontext():
        out.append(torch.randn(8, device=device))  # another stream: after the queued draw
    busy()
    out.append(torch.randn(1000, device=device))
    rng.manual_seed(1)  # the queued randn above drew before this seeding
    out.append(torch.randn(8, device=device))
    return [t.cpu() for t in out]


def test_random_ops_are_queued_and_draw_in_program_order(baseline_memory):
    before = torch_emu._C._launch_counts()
    emu = _draws("emu", busy=lambda: sleep_ms(30))
    queued, _, waited = (a - b for a, b in zip(torch_emu._C._launch_counts(), before))
    assert queued >= 4 and waited == 0  # the four behind busy() were queued; none waited
    cpu = _draws("cpu", busy=lambda: None)
    for e, c in zip(emu, cpu):
        assert torch.equal(e, c)
# LITERALINCLUDE END: TEST_QUEUED_DRAWS


def test_a_kernel_computes_in_the_default_dtype_of_its_call(baseline_memory):
    # int / int computes in the default float dtype; the block that set it has
    # ended before a queued kernel would run (PyTorch's test_div_rounding_numpy).
    a = torch.tensor([1000001, 7], dtype=torch.int64)
    b = torch.tensor([7, 3], dtype=torch.int64)
    ea, eb = a.to("emu"), b.to("emu")
    sleep_ms(100)
    torch.set_default_dtype(torch.double)
    try:
        got, expected = torch.divide(ea, eb), torch.divide(a, b)
    finally:
        torch.set_default_dtype(torch.float32)
    assert got.dtype == torch.float64 and torch.equal(got.cpu(), expected)
    # A float tensor decides the dtype whatever the default: queued (dropout's float * bool mask).
    x, mask = torch.randn(64, 64), torch.rand(64, 64) > 0.5
    ex, emask = x.to("emu"), mask.to("emu")
    sleep_ms(100)
    torch.set_default_dtype(torch.double)
    try:
        before = torch_emu._C._launch_counts()
        got, int_product = ex * emask, ea * 2.5
        queued, _, waited = (n - m for n, m in zip(torch_emu._C._launch_counts(), before))
    finally:
        torch.set_default_dtype(torch.float32)
    assert (queued, waited) == (1, 1)  # int * 2.5 (a Python number) waits: the default dtype decides
    assert got.dtype == torch.float32 and torch.equal(got.cpu(), x * mask)
    assert int_product.dtype == torch.float64 and torch.equal(int_product.cpu(), a.double() * 2.5)


def test_a_stub_called_by_host_code_runs_after_the_queued_work(baseline_memory):
    # ldexp with an integer exponent calls its DispatchStub from host code (no
    # kernel of its own): the stub's CPU kernel must wait for the queued fills
    # of its inputs (PyTorch's test_ldexp read them before they were written).
    m, e = torch.empty(N, dtype=torch.float64, device="emu"), torch.empty(N, dtype=torch.int64, device="emu")
    sleep_ms(100)
    m.fill_(1.0)
    e.fill_(128)
    assert torch.ldexp(m, e).cpu().eq(2.0**128).all()


def test_where_is_queued_and_checks_its_arguments_at_the_call(baseline_memory):
    # As on CUDA, where() checks, converts and sizes on the host and its kernel
    # is queued: Hugging Face's GPT-2 masks its attention with it every layer.
    c, a = torch.rand(64, 64) > 0.5, torch.randn(64, 64)
    ec, ea = c.to("emu"), a.to("emu")
    sleep_ms(100)
    out = torch.empty(0, device="emu")
    before = torch_emu._C._launch_counts()
    got = [torch.where(ec, ea, torch.tensor(-1e9)), torch.where(ec, ea, 0.5), torch.where(ec, ea.double(), ea),
           torch.where(ec, ea, ea * 2, out=out)]
    waited = torch_emu._C._launch_counts()[2] - before[2]
    expected = [torch.where(c, a, torch.tensor(-1e9)), torch.where(c, a, 0.5), torch.where(c, a.double(), a),
                torch.where(c, a, a * 2)]
    assert waited == 0
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and torch.equal(g.cpu(), e)
    assert out.shape == (64, 64) and torch.equal(out.cpu(), expected[-1])
    sleep_ms(100)  # CPU's errors, raised at the call while the stream is busy
    for args, on_cpu in (((ec, ea, ea[:3]), (c, a, a[:3])), ((ec.float(), ea, ea), (c.float(), a, a)),
                         ((ec, ea, ea.double()), (c, a, a.double()))):
        with pytest.raises(RuntimeError) as cpu_error:
            torch.where(*on_cpu, out=torch.empty(0)) if args[2].dtype == torch.double else torch.where(*on_cpu)
        with pytest.raises(RuntimeError, match=re.escape(str(cpu_error.value))):
            torch.where(*args, out=torch.empty(0, device="emu")) if args[2].dtype == torch.double else torch.where(*args)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.where(ec, ea, ea.to("emu:1"))
    del got, out


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_embedding_backward_is_queued_into_a_result_made_at_the_call(baseline_memory, index_dtype):
    # CPU's embedding backward allocates its result inside; emu makes it at the
    # call and lends its memory to the kernel (IntoResult), which is queued.
    torch.manual_seed(0)
    grad, indices = torch.randn(4, 7, 16), torch.randint(0, 10, (4, 7), dtype=index_dtype)
    indices[0, :3] = 2  # repeated rows: the frequency scaling counts them
    eg, ei = grad.to("emu"), indices.to("emu")
    cases = [(10, -1, False), (10, 2, False), (12, -1, True), (10, 2, True)]
    sleep_ms(100)
    before = torch_emu._C._launch_counts()
    got = [torch.ops.aten.embedding_dense_backward(eg.transpose(0, 1), ei.t(), *c) for c in cases]
    waited = torch_emu._C._launch_counts()[2] - before[2]
    assert waited == 0
    for g, c in zip(got, cases):
        expected = torch.ops.aten.embedding_dense_backward(grad.transpose(0, 1), indices.t(), *c)
        assert g.shape == expected.shape and g.stride() == expected.stride() and torch.equal(g.cpu(), expected)
    sleep_ms(100)  # CPU's errors at the call, the stream busy
    for bad in ((eg, ei.float(), 10, -1, False), (eg, ei, -1, -1, False)):
        on_cpu = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in bad)
        with pytest.raises(RuntimeError) as cpu_error:
            torch.ops.aten.embedding_dense_backward(*on_cpu)
        # The type's name is PyTorch's for each device (torch.FloatTensor, emuFloatType).
        message = re.escape(str(cpu_error.value)).replace(r"torch\.FloatTensor", r"\S+")
        with pytest.raises(RuntimeError, match=message):
            torch.ops.aten.embedding_dense_backward(*bad)
    del got
    # Through autograd (nn.Embedding), and replayed by a graph on new gradients.
    emb = torch.nn.Embedding(10, 16, padding_idx=0).to("emu")
    emb(ei).backward(eg)
    cpu_emb = torch.nn.Embedding(10, 16, padding_idx=0)
    cpu_emb.load_state_dict({k: v.cpu() for k, v in emb.state_dict().items()})
    cpu_emb(indices).backward(grad)
    assert torch.equal(emb.weight.grad.cpu(), cpu_emb.weight.grad)
    del emb


@native_runtime_only
def test_where_and_embedding_backward_replay_in_a_graph(baseline_memory):
    # Captured, each replays on what its inputs hold then: where's queued stub
    # on its kept iterator, the embedding backward into the result's memory.
    c, a = torch.rand(64, 64) > 0.5, torch.randn(64, 64)
    grad, indices = torch.randn(4, 7, 16), torch.randint(0, 10, (4, 7))
    ec, ea, eg, ei = c.to("emu"), a.to("emu"), grad.to("emu"), indices.to("emu")
    g = torch.emu.EmuGraph()
    with torch.emu.graph(g):
        y = torch.where(ec, ea, -ea)
        w = torch.ops.aten.embedding_dense_backward(eg, ei, 10, -1, False)
    ea.copy_(torch.ones(64, 64))
    eg.copy_(torch.ones(4, 7, 16))
    g.replay()
    assert torch.equal(y.cpu(), torch.where(c, 1.0, -1.0))
    assert torch.equal(w.cpu(), torch.ops.aten.embedding_dense_backward(torch.ones(4, 7, 16), indices, 10, -1, False))
    del g, y, w


def test_queued_kernel_reads_cpu_scalars_as_launched(baseline_memory):
    x = torch.zeros(4, device="emu")
    s = torch.tensor(2.0)  # a CPU 0-dim operand
    sleep_ms(100)
    x.add_(s)
    s.fill_(100.0)  # the host changes it while the kernel is still queued
    assert x.cpu().eq(2).all()


def test_launch_counts_show_what_ran_asynchronously(baseline_memory):
    x = torch.ones(8, device="emu")
    torch.emu.synchronize()
    before = torch_emu._C._launch_counts()
    x.mul_(3)  # idle stream: runs at once (auto) or is queued
    sleep_ms(50)
    x.add_(1)  # busy stream: queued
    x.nonzero()  # output size depends on the data: waits
    queued, at_once, waited = (a - b for a, b in zip(torch_emu._C._launch_counts(), before))
    assert queued + at_once == 2 and queued >= 1 and waited >= 1
    assert at_once == (0 if torch_emu._C._launch_mode() == "queued" else 1)


def _launches(fn):
    """(queued, at once) launches that fn made."""
    before = torch_emu._C._launch_counts()
    fn()
    return tuple(a - b for a, b in zip(torch_emu._C._launch_counts(), before))[:2]


# LITERALINCLUDE START: TEST_RUN_AT_ONCE
def test_each_branch_of_the_launch_rule(baseline_memory):
    mode = torch_emu._C._launch_mode()
    if mode == "queued":
        pytest.skip("queued launch mode: every kernel is queued")
    small = torch.zeros(4, device="emu")
    large = torch.zeros(1 << 16, device="emu")  # 256 KiB: where queueing starts to pay
    torch.emu.synchronize()
    # An idle stream and a small kernel: at once, and the stream is idle after it.
    assert _launches(lambda: small.add_(1)) == (0, 1)
    assert torch.emu.current_stream().query()
    # An idle stream and a large kernel: queued by the default rule, at once in auto mode.
    assert _launches(lambda: large.add_(1)) == ((0, 1) if mode == "auto" else (1, 0))
    torch.emu.synchronize()
    # A busy stream: queued behind its work whatever the kernel's size, in order.
    sleep_ms(100)
    assert _launches(lambda: small.mul_(3)) == (1, 0)
    assert not torch.emu.current_stream().query()
    torch.emu.synchronize()
    assert small.cpu().eq(3).all() and large.cpu().eq(1).all()
# LITERALINCLUDE END: TEST_RUN_AT_ONCE


# LITERALINCLUDE START: TEST_LOOKUP_COST
def test_a_few_rows_of_a_large_table_are_a_small_kernel(baseline_memory):
    """picks_rows (EmuKernelLaunch.h): a lookup costs what it writes, twice,
    and its indices, whatever the size of the table it reads rows of."""
    mode = torch_emu._C._launch_mode()
    if mode == "blocking":
        pytest.skip("blocking launch mode: every launch waits")
    table = torch.randn(4096, 64, device="emu")  # 1 MiB, far above the small-kernel line
    rows = torch.tensor([3, 4000, 17], device="emu")
    many = torch.randint(0, 4096, (2048,), device="emu")  # 512 KiB of rows
    torch.emu.synchronize()
    small = (1, 0) if mode == "queued" else (0, 1)
    for lookup in (lambda: table.index_select(0, rows), lambda: table.gather(0, rows[:, None].expand(3, 64)),
                   lambda: table[rows], lambda: torch.nn.functional.embedding(rows, table)):
        assert _launches(lookup) == small
    assert _launches(lambda: table.index_select(0, many)) == ((0, 1) if mode == "auto" else (1, 0))
    torch.emu.synchronize()
    torch.testing.assert_close(table.index_select(0, many).cpu(), table.cpu().index_select(0, many.cpu()))
# LITERALINCLUDE END: TEST_LOOKUP_COST



@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs a kernel with OpenMP threads")
def test_scratch_allocated_on_a_kernels_openmp_threads_keeps_stream_order(baseline_memory):
    """Attention's backward allocates device memory on its OpenMP threads,
    which do not carry the kernel's thread-locals. That memory must not be a
    block freed after the kernel's launch that a later kernel still reads.
    Queued behind a sleep, the backward runs when the embedding's backward
    waits for it, on the waiting thread's whole OpenMP team."""
    torch.manual_seed(0)
    emb, norm = torch.nn.Embedding(10, 8), torch.nn.LayerNorm(8)
    attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    tokens, target = torch.randint(0, 10, (3, 6)), torch.randint(0, 8, (3,))

    def grads(device):
        mods = [m.to(device) for m in (emb, norm, attn)]
        for m in mods:
            m.zero_grad(set_to_none=True)
        h = norm(emb(tokens.to(device)))
        h = attn(h, h, h, need_weights=False)[0] + torch.nn.functional.gelu(h)
        loss = torch.nn.functional.cross_entropy(torch.tanh(h.sum(1)), target.to(device))
        if device == "emu":
            sleep_ms(50)  # the whole backward is queued
        loss.backward()
        return [p.grad.to("cpu", copy=True) for m in mods for p in m.parameters()]

    for got, expected in zip(grads("emu"), grads("cpu")):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_sleep_rejects_negative_cycles():
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.emu._sleep(-1)
    for cycles in (2**70, 1.5, "10"):  # named, not pybind's dump of its signatures
        with pytest.raises(ValueError, match=r"torch.emu._sleep: cycles must be a whole number .* got"):
            torch.emu._sleep(cycles)


STRICT_SCRIPT = """
import ctypes, torch, torch_emu
x = torch.zeros(4, device="emu")
torch.emu.synchronize()
torch.emu._sleep(2_000 * (torch.emu.get_device_properties().clock_rate or 1_000_000))
x.add_(1)  # queued behind the sleep
print(ctypes.c_float.from_address(x.data_ptr()).value)  # the bug: a host read, no synchronize
"""


@native_runtime_only
def test_strict_mode_catches_a_host_read_of_a_pending_result():
    env = dict(os.environ, TORCH_EMU_STRICT="1")
    r = subprocess.run([sys.executable, "-c", STRICT_SCRIPT], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "strict mode: host access to device memory" in r.stderr


# LITERALINCLUDE START: TEST_LAUNCH_BLOCKING
BLOCKING_SCRIPT = """
import torch, torch_emu
assert torch_emu._C._launch_mode() == "blocking"
src = torch.arange(6.0, device="emu").view(2, 3)
try:
    src.gather(1, torch.tensor([[0, 5, 1]], device="emu"))
except RuntimeError as e:
    print("raised at the call:", type(e).__name__)
"""


def test_launch_blocking_reports_errors_where_the_op_is_called():
    env = dict(os.environ, TORCH_EMU_LAUNCH_BLOCKING="1")
    r = subprocess.run([sys.executable, "-c", BLOCKING_SCRIPT], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "raised at the call" in r.stdout
# LITERALINCLUDE END: TEST_LAUNCH_BLOCKING


@pytest.mark.parametrize("blocking, queued, mode", [
    ("false", "on", "queued"),  # "false" used to turn blocking on
    ("off", "No", "auto"),
    ("Yes", "0", "blocking"),
    (" ", " TRUE ", "queued"),  # blank is unset
    ("", " ", "default"),
])
def test_launch_flags_take_every_boolean_spelling(blocking, queued, mode):
    if mode == "default":  # adaptive with two cores or more; auto when the runtime in Python asks for it
        mode = "auto" if torch_emu.runtime.active() == "python" or len(os.sched_getaffinity(0)) == 1 else "adaptive"
    result = run_after_import("import torch_emu; print(torch_emu._C._launch_mode())",
                        TORCH_EMU_LAUNCH_BLOCKING=blocking, TORCH_EMU_LAUNCH_QUEUED=queued)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == mode


def test_the_default_counts_the_cores_the_process_may_use():
    # taskset -c 0 on a machine of more cores leaves no core for a stream's
    # worker: the default is then auto, as on one core.
    result = run_after_import("""
        import os, torch, torch_emu
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        print(torch_emu._C._launch_mode())
    """, TORCH_EMU_LAUNCH_BLOCKING="", TORCH_EMU_LAUNCH_QUEUED="")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "auto"


@pytest.mark.parametrize("variable", ["TORCH_EMU_LAUNCH_BLOCKING", "TORCH_EMU_LAUNCH_QUEUED"])
def test_a_bad_launch_flag_fails_every_use_naming_it(variable):
    result = run_after_import("""
        import torch
        for _ in range(2):
            try:
                torch.empty(2, device="emu")  # no kernel: the device's start reads the launch mode
            except RuntimeError as e:
                print(type(e).__name__, e)
    """, **{"TORCH_EMU_LAUNCH_BLOCKING": "", "TORCH_EMU_LAUNCH_QUEUED": "", variable: "maybe"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"RuntimeError {variable}='maybe' is not a boolean: expected 1/0, true/false, yes/no or on/off"] * 2


# LITERALINCLUDE START: TEST_HOST_TEAM
@pytest.mark.launch_mode
@native_runtime_only  # a host thread that waits runs the stream's work itself
@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs an OpenMP team of two threads or more")
def test_small_kernels_on_the_host_thread_run_without_its_team(baseline_memory):
    """A kernel the host thread runs uses its OpenMP team only from 512 KiB:
    after a team's work its threads spin, on the core the stream's worker
    needs. The worker's team is the cores the host leaves free."""
    mode = torch_emu._C._launch_mode()
    if mode == "blocking":
        pytest.skip("blocking launch mode: launches do not say what their kernel reads")
    team, small, large = torch.get_num_threads(), 1 << 10, 1 << 20
    out = torch.zeros(1, dtype=torch.int32, device="emu")
    torch.emu.synchronize()

    def threads(nbytes, behind_sleep, host_waits):
        if behind_sleep:
            sleep_ms(50)  # the kernel is queued behind it
        torch_emu._C._kernel_threads(out, nbytes)
        if not host_waits:  # the worker runs it: query() waits for nothing
            while not torch.emu.current_stream().query():
                time.sleep(0.001)
        return out.item()  # waits: the host thread runs what is still queued

    if mode != "queued":
        assert threads(small, behind_sleep=False, host_waits=True) == 1  # at once on the host
    assert threads(small, behind_sleep=True, host_waits=True) == 1
    assert threads(large, behind_sleep=True, host_waits=True) == team
    assert threads(small, behind_sleep=True, host_waits=False) == max(1, team - 1)
    assert torch.get_num_threads() == team  # the host thread's own setting is back
# LITERALINCLUDE END: TEST_HOST_TEAM
