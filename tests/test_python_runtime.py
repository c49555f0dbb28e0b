"""The runtime API implemented in Python (torch_emu/runtime): the reference
runtime on its own, and PyTorch on emu with it installed, in fresh processes
(TORCH_EMU_RUNTIME=python). The suites that CI also runs whole with the Python
runtime are listed in scripts/test_python_runtime.sh."""

import ctypes
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import run_python
from _after_import import run_after_import

from torch_emu.runtime import EmuError, Error, MemcpyKind, MemoryType, Runtime
from torch_emu.runtime.reference import ReferenceRuntime

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def python_runtime(code: str, **env) -> str:
    result = run_after_import(code, TORCH_EMU_RUNTIME="python", **env)
    assert result.returncode == 0, result.stderr
    return result.stdout


# ---- the reference runtime alone: no torch in the way ------------------------

@pytest.fixture
def rt(monkeypatch):
    monkeypatch.setenv("TORCH_EMU_DEVICE_MEMORY", "1MiB")
    runtime = ReferenceRuntime()
    yield runtime
    for handle in list(runtime._streams):
        runtime.stream_destroy(handle)


@pytest.mark.launch_mode
def test_memory_is_best_fit_in_pages_and_coalesces(rt):
    a, b, c = (rt.malloc(0, 4096) for _ in range(3))
    assert (b - a, c - b) == (4096, 4096)
    assert rt.pointer_attributes(b + 100) == (MemoryType.DEVICE, 0)
    assert rt.mem_get_info(0) == (2**20 - 3 * 4096, 2**20)
    rt.free(a)
    rt.free(b)
    assert rt.malloc(0, 8192) == a  # the two freed pages, coalesced
    with pytest.raises(EmuError) as e:
        rt.malloc(0, 2**20)
    assert e.value.code == Error.MEMORY_ALLOCATION and "out of memory on emu:0" in str(e.value)
    with pytest.raises(EmuError) as e:
        rt.free(c + 8)
    assert e.value.code == Error.INVALID_DEVICE_POINTER


@pytest.mark.launch_mode
def test_copies_check_their_kind_and_pinned_memory_is_known(rt):
    dev = rt.malloc(1, 64)
    host = ctypes.create_string_buffer(b"emu!" * 16)
    pinned = rt.malloc_host(64)
    assert rt.pointer_attributes(pinned + 3) == (MemoryType.HOST, -1)
    assert rt.pointer_attributes(ctypes.addressof(host)) == (MemoryType.UNREGISTERED, -1)
    rt.memcpy(dev, ctypes.addressof(host), 64, MemcpyKind.HOST_TO_DEVICE)
    stream = rt.stream_create(1, 0)
    rt.memcpy_async(pinned, dev, 64, MemcpyKind.DEVICE_TO_HOST, stream)
    rt.stream_synchronize(stream)
    assert ctypes.string_at(pinned, 64) == b"emu!" * 16
    with pytest.raises(EmuError, match="HOST_TO_DEVICE destination .* is not emu device memory"):
        rt.memcpy(pinned, dev, 64, MemcpyKind.HOST_TO_DEVICE)
    with pytest.raises(EmuError, match="runs past the end"):
        rt.memcpy(ctypes.addressof(host), dev + 2**20 - 8, 64, MemcpyKind.DEVICE_TO_HOST)
    rt.free_host(pinned)
    rt.free(dev)


@pytest.mark.launch_mode
def test_stream_runs_in_order_and_events_time_it(rt):
    stream = rt.stream_create(0, 0)
    start, end = rt.event_create(True), rt.event_create(True)
    order = []
    rt.event_record(start, stream)
    rt.launch_kernel(stream, lambda: time.sleep(0.05) or order.append(1), asynchronous=True)
    rt.launch_kernel(stream, lambda: order.append(2), asynchronous=False)  # busy: queued behind
    rt.event_record(end, stream)
    assert rt.stream_pending(stream) and not rt.event_query(end)
    rt.event_synchronize(end)
    assert order == [1, 2]
    assert rt.event_elapsed_time(start, end) >= 50
    assert rt.stream_query(stream)


@pytest.mark.launch_mode
def test_wait_event_orders_two_streams(rt):
    producer, consumer = rt.stream_create(0, 0), rt.stream_create(0, -1)
    done = rt.event_create(False)
    seen = []
    rt.launch_kernel(producer, lambda: time.sleep(0.05) or seen.append("produced"), asynchronous=True)
    rt.event_record(done, producer)
    rt.stream_wait_event(consumer, done)
    rt.launch_kernel(consumer, lambda: seen.append("consumed"), asynchronous=True)
    rt.stream_synchronize(consumer)
    assert seen == ["produced", "consumed"]
    with pytest.raises(EmuError) as e:
        rt.event_elapsed_time(done, done)
    assert e.value.code == Error.INVALID_RESOURCE_HANDLE


@pytest.mark.launch_mode
def test_failures_surface_where_they_are_observed(rt):
    stream = rt.stream_create(0, 0)
    with pytest.raises(EmuError, match="the kernel failed on emu:0: boom") as e:
        rt.launch_kernel(stream, lambda: "boom", asynchronous=False)  # idle: ran here
    assert e.value.code == Error.LAUNCH_FAILURE
    rt.launch_kernel(stream, lambda: "queued boom", asynchronous=True)
    with pytest.raises(EmuError, match="failed: queued boom"):
        rt.stream_synchronize(stream)
    rt.stream_synchronize(stream)  # reported once; the stream stays usable
    with pytest.raises(EmuError) as e:
        rt.stream_device(12345)
    assert e.value.code == Error.INVALID_RESOURCE_HANDLE


@pytest.mark.launch_mode
def test_work_launched_from_running_work_runs_in_place(rt):
    stream = rt.stream_create(0, 0)
    inner = []

    def outer():
        rt.launch_kernel(stream, lambda: inner.append(threading.get_ident()), asynchronous=True)
        rt.stream_synchronize(stream)  # waits only for work before this one: no deadlock
        inner.append(threading.get_ident())

    rt.launch_kernel(stream, outer, asynchronous=True)
    rt.stream_synchronize(stream)
    assert len(inner) == 2 and inner[0] == inner[1] != threading.get_ident()


# ---- PyTorch on the Python runtime -------------------------------------------

def test_selected_by_the_environment_and_trains_like_the_native_runtime():
    code = """
        import torch, torch_emu
        from torch_emu.demo import train
        print(torch_emu.runtime.active(), train("emu:0", 30, progress=False)[0])
    """
    native = run_python(code, TORCH_EMU_RUNTIME="native")
    python = run_after_import(code, TORCH_EMU_RUNTIME="python")  # the server python_runtime() uses
    assert native.returncode == 0 and python.returncode == 0, native.stderr + python.stderr
    native_name, native_losses = native.stdout.split(" ", 1)
    python_name, python_losses = python.stdout.split(" ", 1)
    assert (native_name, python_name) == ("native", "python")
    assert python_losses == native_losses  # the same kernels: bit-identical losses


@pytest.mark.launch_mode
def test_out_of_memory_is_torch_out_of_memory_error():
    out = python_runtime("""
        import torch
        x = torch.empty(40 * 2**20, dtype=torch.uint8, device="emu")
        try:
            torch.empty(40 * 2**20, dtype=torch.uint8, device="emu")
        except torch.OutOfMemoryError as e:
            print("oom:", "out of memory on emu:0" in str(e))
        del x
        torch.emu.empty_cache()
        print("after:", torch.emu.memory_allocated(), torch.emu.mem_get_info()[0] == 64 * 2**20)
    """, TORCH_EMU_DEVICE_MEMORY="64MiB")
    assert out.split() == ["oom:", "True", "after:", "0", "True"]


@pytest.mark.launch_mode
def test_queued_kernel_failure_surfaces_at_the_next_sync():
    out = python_runtime("""
        import torch
        x, index = torch.randn(4, device="emu"), torch.tensor([7], device="emu")
        try:
            torch.index_select(x, 0, index)
            torch.emu.synchronize()
        except (IndexError, torch.AcceleratorError) as e:
            print(type(e).__name__, "out of range" in str(e) or "out of bounds" in str(e))
        print((x + 1).sum().item() == (x.cpu() + 1).sum().item())
    """, TORCH_EMU_LAUNCH_QUEUED="1", TORCH_EMU_LAUNCH_BLOCKING="0")
    assert out.split() == ["AcceleratorError", "True", "True"]


@pytest.mark.launch_mode
def test_native_only_calls_say_so():
    out = python_runtime("""
        import torch
        for call in (lambda: torch.emu.faults.inject("oom"), lambda: torch.emu.graph(torch.emu.Graph()).__enter__()):
            try:
                call()
            except torch.AcceleratorError as e:
                print("emuErrorNotSupported" in str(e) and "'python' runtime" in str(e))
    """)
    assert out.split() == ["True", "True"]


def test_install_is_checked():
    out = run_after_import("""
        import torch, torch_emu.runtime as runtime
        from torch_emu.runtime.reference import ReferenceRuntime
        try:
            runtime.install(object())
        except TypeError as e:
            print("type:", "Runtime" in str(e))
        torch.ones(1, device="emu")
        try:
            runtime.install(ReferenceRuntime())
        except torch.AcceleratorError as e:
            print("late:", "already in use" in str(e))
        print(runtime.active())
    """, TORCH_EMU_RUNTIME="native")
    assert out.stdout.split() == ["type:", "True", "late:", "True", "native"], out.stderr


def test_bad_runtime_name_is_an_error_naming_the_variable():
    result = run_python("import torch; torch.ones(1, device='emu')", TORCH_EMU_RUNTIME="bogus")
    assert result.returncode != 0 and "TORCH_EMU_RUNTIME='bogus'" in result.stderr


@pytest.mark.parametrize("spec, error, message", [
    ("os:path", "TypeError", "os.path is not callable (type module); expected 'native', 'python' or "
                             "'module:attribute'"),
    ("os:SEEK_END", "TypeError", "os.SEEK_END is not callable (type int)"),
    ("os:getcwd", "TypeError", "os.getcwd() returned a value of type str, not a torch_emu.runtime.Runtime"),
    ("no_such_module:Runtime", "ValueError", "No module named 'no_such_module'; expected 'native'"),
])
def test_a_runtime_spec_naming_no_runtime_is_an_error_naming_the_variable(spec, error, message):
    result = run_python("""
        try:
            import torch
        except RuntimeError as e:  # autoload wraps what importing torch_emu raised
            print(type(e.__cause__).__name__, e.__cause__)
    """, TORCH_EMU_RUNTIME=spec, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{error} TORCH_EMU_RUNTIME={spec!r}: {message}")


@pytest.mark.launch_mode
def test_a_runtime_that_raises_is_a_clear_error():
    result = run_after_import("""
        import torch, torch_emu.runtime as runtime
        from torch_emu.runtime.reference import ReferenceRuntime

        class Broken(ReferenceRuntime):
            def malloc(self, device, size):
                raise ZeroDivisionError("no memory today")

        runtime.install(Broken())
        try:
            torch.ones(1, device="emu")
        except torch.AcceleratorError as e:
            print("emuErrorUnknown" in str(e), "ZeroDivisionError: no memory today" in str(e))
        print(torch.emu.memory_allocated())
    """, TORCH_EMU_RUNTIME="native")
    assert result.stdout.split() == ["True", "True", "0"], result.stderr


def test_fork_after_use_fails_in_the_child():
    out = python_runtime("""
        import os, torch
        torch.ones(1, device="emu")
        pid = os.fork()
        if pid == 0:
            try:
                torch.ones(1, device="emu")
                os._exit(1)
            except torch.AcceleratorError as e:
                os._exit(0 if "before fork()" in str(e) else 2)
        print(os.waitpid(pid, 0)[1])
    """)
    assert out.split() == ["0"]


# LITERALINCLUDE START: TEST_LOGGING_RUNTIME
def test_logging_runtime_example_logs_every_call():
    result = run_python("""
        import torch
        x = torch.ones(4, device="emu") * 2
        print(x.sum().item())
    """, TORCH_EMU_RUNTIME="logging_runtime:LoggingRuntime", PYTHONPATH=str(EXAMPLES))
    assert result.returncode == 0 and result.stdout.split() == ["8.0"], result.stderr
    calls = [line.split("(")[0] for line in result.stderr.splitlines() if line.startswith("emu runtime: ")]
    assert {"emu runtime: malloc", "emu runtime: launch_kernel", "emu runtime: memcpy_async"} <= set(calls)
# LITERALINCLUDE END: TEST_LOGGING_RUNTIME


def test_runtime_is_an_abstract_interface():
    with pytest.raises(TypeError, match="abstract"):
        Runtime()
