"""Injected faults (torch.emu.faults): each surfaces as the exception PyTorch
code expects, leaves the allocator consistent, and is recoverable where real
hardware is (out of memory, a failed kernel or copy) and not where it is not
(a lost device)."""

import os

import pytest
import torch
from _after_import import run_after_import

import torch_emu

pytestmark = pytest.mark.launch_mode

faults = torch.emu.faults


@pytest.fixture(autouse=True)
def no_faults_left():
    yield
    faults.remove_all()


def device_bytes_taken(device: int = 0) -> int:
    free, total = torch.emu.mem_get_info(device)
    return total - free


# LITERALINCLUDE START: TEST_OOM_RETRY
def test_training_loop_retries_with_a_smaller_batch_after_oom(baseline_memory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to("emu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.emu.empty_cache()
    # A device with 8 MiB more than the model takes: a batch of 16384 (16 MiB
    # of input alone) cannot fit, 1024 can.
    with faults.inject("oom", limit=device_bytes_taken() + 8 * 2**20) as fault:
        done = []
        for batch in (16384, 4096, 1024):
            try:
                x = torch.randn(batch, 256, device="emu")
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                done.append(batch)
                break
            except torch.OutOfMemoryError as e:
                assert "injected limit" in str(e)
                x = loss = None
                opt.zero_grad()
                torch.emu.empty_cache()
        assert done and done[0] <= 4096
        assert fault.hits >= 1
    del model, opt, x, loss
# LITERALINCLUDE END: TEST_OOM_RETRY


def test_oom_at_the_nth_allocation_is_torch_out_of_memory(baseline_memory):
    torch.emu.empty_cache()
    # Twice: the caching allocator frees its cache and tries once more.
    with faults.inject("oom", times=2) as fault:
        with pytest.raises(torch.emu.OutOfMemoryError, match="injected fault"):
            torch.empty(2**20, device="emu")
        assert fault.hits == 2
        x = torch.empty(2**20, device="emu")  # the fault is spent: the device works
    assert torch.emu.memory_allocated() >= x.nbytes
    del x


def test_one_oom_is_absorbed_by_the_allocators_retry(baseline_memory):
    torch.emu.empty_cache()
    x = torch.empty(2**20, device="emu")
    del x  # a cached segment, which the retry frees
    retries = torch.emu.memory_stats()["num_alloc_retries"]
    with faults.inject("oom", times=1) as fault:
        y = torch.empty(16 * 2**20, device="emu")  # needs a new segment
        assert fault.hits == 1
    assert torch.emu.memory_stats()["num_alloc_retries"] == retries + 1
    del y


def test_a_failed_kernel_raises_and_the_device_stays_usable(baseline_memory):
    x = torch.arange(6.0, device="emu")
    with faults.inject("kernel") as fault:
        # At the launch when the kernel runs there, else at the next sync.
        with pytest.raises(torch.AcceleratorError, match="injected fault .*kernel launch"):
            y = x * 2
            torch.emu.synchronize()
        assert fault.hits == 1
    assert (x * 2).cpu().tolist() == [0, 2, 4, 6, 8, 10]
    y = None  # noqa: F841


def test_a_fault_for_one_op_fails_only_its_kernels(baseline_memory):
    x = torch.arange(4.0, device="emu")
    with faults.inject("kernel", op="structured_mul_out", times=0) as fault:
        y = x + 1  # another op: not counted
        torch.emu.synchronize()
        with pytest.raises(torch.AcceleratorError, match="injected fault"):
            z = y * 2
            torch.emu.synchronize()
        assert fault.hits == 1
    assert (y * 2).cpu().tolist() == [2.0, 4.0, 6.0, 8.0]
    z = None  # noqa: F841
    del x, y


def test_a_fault_for_one_op_fails_its_captured_kernels_at_capture_and_replay(baseline_memory):
    x = torch.arange(4.0, device="emu")
    with faults.inject("kernel", op="mul", times=0) as fault:
        with pytest.raises(torch.AcceleratorError, match="injected fault"):
            with torch.emu.graph(torch.emu.EmuGraph()):
                y = x + 1  # another op: captured
                z = y * 2  # fails as it is captured
        assert fault.hits == 1
    g = torch.emu.EmuGraph()
    with torch.emu.graph(g):
        y = x + 1
        z = y * 2
    with faults.inject("kernel", op="div", times=0) as other:  # no such kernel in the graph
        g.replay()
        torch.emu.synchronize()
        assert other.hits == 0
    with faults.inject("kernel", op="mul", times=0) as fault:
        with pytest.raises(torch.AcceleratorError, match="injected fault"):
            g.replay()
            torch.emu.synchronize()
        assert fault.hits == 1
    x.fill_(1.0)
    g.replay()  # the graph and the device work on
    assert z.cpu().tolist() == [4.0] * 4
    g.reset()
    del x, y, z


@pytest.mark.skipif(torch_emu._C._launch_mode() == "blocking", reason="every launch waits for its kernel")
def test_a_queued_kernel_error_surfaces_at_the_next_sync_once(baseline_memory):
    x = torch.ones(4, device="emu")
    clock_khz = torch.emu.get_device_properties().clock_rate or 1_000_000
    torch.emu._sleep(clock_khz * 20)  # 20 ms: the launches below queue behind it
    with faults.inject("kernel", after=1):
        y = x + 1
        z = y * 3  # the failing launch returns
        with pytest.raises(torch.AcceleratorError, match=r"failed.*injected fault \d+: kernel launch 2"):
            torch.emu.synchronize()
    torch.emu.synchronize()  # reported once
    assert (y * 3).cpu().tolist() == [6.0] * 4
    del x, y, z


def test_a_failed_copy_copies_nothing_and_the_next_one_works(baseline_memory):
    x = torch.arange(4.0, device="emu")
    host = torch.zeros(4)
    with faults.inject("copy", device=0):
        with pytest.raises(torch.AcceleratorError, match="uncorrectable memory error"):
            host.copy_(x)
    assert host.tolist() == [0.0] * 4
    host.copy_(x)
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0]
    with faults.inject("copy"):
        with pytest.raises(torch.AcceleratorError, match="uncorrectable"):
            torch.ones(3).to("emu")
    with faults.inject("copy"):
        with pytest.raises(torch.AcceleratorError, match="uncorrectable"):
            x[1].item()  # .item() is a device-to-host copy too
    assert x[1].item() == 1.0
    del x


def test_checkpoint_save_under_a_copy_failure_keeps_the_last_checkpoint(tmp_path, baseline_memory):
    model = torch.nn.Linear(4, 4).to("emu")
    path = tmp_path / "model.pt"

    def save_atomically(obj, target):
        partial = target.with_suffix(".partial")
        try:
            torch.save(obj, partial)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)

    save_atomically(model.state_dict(), path)
    before = path.read_bytes()
    with torch.no_grad():
        model.weight.add_(1)
    with faults.inject("copy"):
        with pytest.raises(torch.AcceleratorError, match="uncorrectable"):
            save_atomically(model.state_dict(), path)
    assert path.read_bytes() == before  # the old checkpoint, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
    save_atomically(model.state_dict(), path)
    assert torch.equal(torch.load(path)["weight"].cpu(), model.weight.detach().cpu())
    del model


def test_a_lost_device_fails_every_later_call_and_still_tears_down():
    result = run_after_import(
        """
        import torch, torch_emu
        x = torch.ones(4, device="emu")
        torch.emu.faults.inject("device_lost", after=1)
        y = x + 1
        for attempt in (lambda: x * 2, lambda: torch.ones(1, device="emu"), lambda: x.cpu(),
                        torch.emu.synchronize):
            try:
                attempt()
            except torch.AcceleratorError as e:
                assert "device was lost" in str(e), e
            else:
                raise AssertionError("a call succeeded on a lost device")
        del x, y  # freeing still works
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert "Traceback" not in result.stderr


def test_faults_from_the_environment():
    result = run_after_import(
        """
        import torch, torch_emu
        x = torch.empty(3, device="emu").fill_(2.0)
        print(x.cpu().tolist())
        try:
            x.cpu()
        except torch.AcceleratorError as e:
            print("failed:", "uncorrectable" in str(e))
        print(x.cpu().tolist())
        """,
        TORCH_EMU_FAULTS="copy:after=1,times=1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["[2.0, 2.0, 2.0]", "failed: True", "[2.0, 2.0, 2.0]"]


def test_bad_fault_requests_are_clear_errors():
    with pytest.raises(ValueError, match="unknown fault kind 'bogus'"):
        faults.inject("bogus")
    with pytest.raises(ValueError, match="limit is a positive byte count"):
        faults.inject("kernel", limit=10)
    with pytest.raises(ValueError, match="op is a non-empty name, for kind 'kernel'"):
        faults.inject("copy", op="mul")
    with pytest.raises(ValueError, match=r"after must be a whole number from 0 to 2\*\*63-1, got -1"):
        faults.inject("oom", after=-1)
    with pytest.raises(ValueError, match="op is a non-empty name, for kind 'kernel' only; got op=5"):
        faults.inject("kernel", op=5)
    with pytest.raises(RuntimeError, match="Invalid device|invalid device"):
        faults.inject("oom", device=torch.emu.device_count())
    with pytest.raises(torch.AcceleratorError, match="Invalid device emu:1180591620717411303424: there are"):
        faults.inject("oom", device=2**70)
    result = run_after_import("import torch, torch_emu; torch.ones(1, device='emu')", TORCH_EMU_FAULTS="oom:sometimes")
    assert result.returncode != 0
    assert "TORCH_EMU_FAULTS: unknown option 'sometimes'" in result.stderr


@pytest.mark.parametrize("kwargs, message", [
    ({"after": 1.5}, r"after must be a whole number from 0 to 2\*\*63-1, got 1.5"),
    ({"after": 2**70}, r"after must be a whole number from 0 to 2\*\*63-1, got 1180591620717411303424"),
    ({"after": True}, r"after must be a whole number from 0 to 2\*\*63-1, got True"),
    ({"times": "3"}, r"times must be a whole number from 0 to 2\*\*63-1, got '3'"),
    ({"times": 2**64}, r"times must be a whole number from 0 to 2\*\*63-1, got 18446744073709551616"),
    ({"limit": 0}, r"limit must be a whole number from 1 to 2\*\*63-1, got 0"),
    ({"limit": 2.0**40}, r"limit must be a whole number from 1 to 2\*\*63-1, got 1099511627776.0"),
], ids=["after_float", "after_huge", "after_bool", "times_str", "times_huge", "limit_zero", "limit_float"])
def test_bad_numbers_name_the_argument_and_arm_nothing(kwargs, message, baseline_memory):
    kind = "oom" if "limit" in kwargs else "kernel"
    with pytest.raises(ValueError, match=f"^torch.emu.faults.inject: {message}$"):
        faults.inject(kind, **kwargs)
    assert (torch.ones(2, device="emu") * 3).cpu().tolist() == [3.0, 3.0]  # nothing was armed


SEEDED_CODE = """
import os, torch
torch.manual_seed(0)  # queued until emu starts
for _ in range(2):
    try:
        torch.randn(3, device="emu")
    except ValueError as e:
        print("ValueError", e)
os.environ.pop("TORCH_EMU_FAULTS", None)
print(torch.randn(3, device="emu").cpu().tolist())
"""


@pytest.fixture(scope="module")
def seeded_numbers():
    result = run_after_import("import torch; torch.manual_seed(0); print(torch.randn(3, device='emu').cpu().tolist())",
                        TORCH_EMU_FAULTS="", TORCH_EMU_DEVICE_COUNT="2")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("spec, message", [
    ("oom:after=abc", "after='abc' is not a whole number (in 'oom:after=abc')"),
    # 'copy' is valid but not armed either: the copy to the host below works
    ("copy;oom:device=9", "device=9 is out of range: there are 2 emu devices, 0 to 1 (in 'oom:device=9')"),
    ("oom:limit=lots", "limit='lots' is not a size such as 512MiB (in 'oom:limit=lots')"),
    ("kernel:times=18446744073709551616", "times must be a whole number from 0 to 2**63-1, got "
                                          "18446744073709551616 (in 'kernel:times=18446744073709551616')"),
])
def test_a_bad_fault_spec_fails_every_use_and_leaves_nothing_half_done(spec, message, seeded_numbers):
    result = run_after_import(SEEDED_CODE, TORCH_EMU_FAULTS=spec, TORCH_EMU_DEVICE_COUNT="2")
    assert result.returncode == 0, result.stderr
    *errors, numbers = result.stdout.strip().splitlines()
    assert errors == [f"ValueError TORCH_EMU_FAULTS: {message}"] * 2
    assert numbers == seeded_numbers  # the seed given before the failed start still applies


def test_a_removed_fault_never_fires(baseline_memory):
    fault = faults.inject("kernel", after=10**9)
    fault.remove()
    fault.remove()  # twice is fine
    assert fault.hits == 0
    assert (torch.ones(2, device="emu") + 1).cpu().tolist() == [2.0, 2.0]
