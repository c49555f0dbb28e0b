"""The performance model (TORCH_EMU_PROFILE): copies take at least their
modelled time, kernels start a launch latency late and run slower, and work
held by the model occupies its stream, not the host or other streams. Each
case runs in a fresh process (the model is read once, at start). Only lower
bounds are asserted: the model guarantees them, the machine can only add."""

import json

import pytest
from conftest import first_use_errors
from _after_import import run_after_import

pytestmark = pytest.mark.launch_mode

MIB = 2**20


def in_process(code: str, profile: str) -> dict:
    result = run_after_import(code, TORCH_EMU_PROFILE=profile)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# LITERALINCLUDE START: TEST_COPY_BANDWIDTH
def test_copies_take_their_modelled_time():
    out = in_process(
        f"""
        import json, torch, torch_emu
        host = torch.empty({8 * MIB}, dtype=torch.uint8).pin_memory()
        dev = torch.empty({8 * MIB}, dtype=torch.uint8, device="emu")
        def timed(copy):
            start, end = torch.emu.Event(enable_timing=True), torch.emu.Event(enable_timing=True)
            start.record(); copy(); end.record(); end.synchronize()
            return start.elapsed_time(end)
        dev.copy_(host, non_blocking=True); torch.emu.synchronize()  # warm
        h2d = timed(lambda: dev.copy_(host, non_blocking=True))
        d2h = timed(lambda: host.copy_(dev, non_blocking=True))
        print(json.dumps({{"h2d": h2d, "d2h": d2h, "model": torch_emu._C._performance_model()}}))
        """,
        profile="h2d=1GB/s,d2h=2GB/s",
    )
    assert out["model"]["h2d_bytes_per_second"] == 1e9
    assert out["h2d"] >= 0.95 * 8 * MIB / 1e9 * 1e3  # 8.39 ms
    assert out["d2h"] >= 0.95 * 8 * MIB / 2e9 * 1e3  # 4.19 ms
# LITERALINCLUDE END: TEST_COPY_BANDWIDTH


def test_a_modelled_copy_overlaps_compute_on_another_stream():
    out = in_process(
        f"""
        import json, torch, torch_emu
        host = torch.empty({16 * MIB}, dtype=torch.uint8).pin_memory()
        dev = torch.empty({16 * MIB}, dtype=torch.uint8, device="emu")
        x = torch.ones(64, device="emu")
        side = torch.emu.Stream()
        copied = torch.emu.Event()
        with torch.emu.stream(side):
            dev.copy_(host, non_blocking=True)  # 16 MiB at 0.5 GB/s: 33.6 ms on `side`
            copied.record()
        y = (x * 2).sum()  # the current stream does not wait for `side`
        print(json.dumps({{"sum": y.item(), "copy_still_running": not copied.query()}}))
        torch.emu.synchronize()
        """,
        profile="h2d=0.5GB/s",
    )
    assert out == {"sum": 128.0, "copy_still_running": True}


def test_launch_latency_and_kernel_slowdown_hold_the_stream():
    out = in_process(
        """
        import json, torch, torch_emu
        x = torch.ones(256, 256, device="emu")
        start, end = torch.emu.Event(enable_timing=True), torch.emu.Event(enable_timing=True)
        start.record(); y = x + 1; end.record(); end.synchronize()
        print(json.dumps({"ms": start.elapsed_time(end), "ok": y.sum().item() == 2 * 256 * 256,
                          "model": torch_emu._C._performance_model()}))
        """,
        profile="pcie4,launch=20ms,slowdown=2",
    )
    assert out["ok"]
    assert out["ms"] >= 0.95 * 20
    assert out["model"]["h2d_bytes_per_second"] == 25e9  # the preset, then the overrides
    assert out["model"]["kernel_slowdown"] == 2.0


@pytest.mark.parametrize("profile, message", [
    ("warp9", "'warp9' is not a preset"),
    ("h2d=fast", "bad value 'fast' for h2d"),
    ("slowdown=0.5", "bad value '0.5' for slowdown"),
    ("latency=5us", "unknown key 'latency'"),
])
def test_a_bad_profile_is_a_clear_error_at_start(profile, message):
    result = run_after_import("import torch, torch_emu; torch.ones(1, device='emu')", TORCH_EMU_PROFILE=profile)
    assert result.returncode != 0
    assert f"TORCH_EMU_PROFILE='{profile}'" in result.stderr
    assert message in result.stderr


@pytest.mark.parametrize("profile, key, value, example", [
    ("h2d=10", "h2d", "10", "10GB/s"),  # was 10 bytes per second
    ("pcie4,copy=10GB", "copy", "10GB", "10GB/s"),
    ("launch=5", "launch", "5", "5us"),
])
def test_a_rate_or_duration_without_its_unit_fails_every_use(profile, key, value, example):
    first, second = first_use_errors(TORCH_EMU_PROFILE=profile)
    assert first == second
    error, message = first.split(" ", 1)
    assert error == "AcceleratorError"
    assert message.startswith(f"TORCH_EMU_PROFILE='{profile}': bad value '{value}' for {key}: expected ")
    assert f"with a unit, such as {example}" in message


def test_without_a_profile_nothing_is_modelled():
    result = run_after_import(
        "import torch, torch_emu, json; torch.ones(1, device='emu'); "
        "print(json.dumps(torch_emu._C._performance_model()))"
    )
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)
    assert model["kernel_slowdown"] == 1.0
    assert all(v == 0 for k, v in model.items() if k != "kernel_slowdown")
