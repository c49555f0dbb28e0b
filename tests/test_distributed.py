"""The emu_gloo c10d backend: collectives, async work, DDP, faults, torchrun.

Every test starts fresh processes (one per rank) on 127.0.0.1 with a free port
picked at run time, and kills them if they outlive a bounded timeout.
"""

import subprocess
import sys
import time

import pytest
import torch
from _dist_launch import ROOT, assert_ok, free_port
from _dist_launch import launch as _launch
from _dist_launch import rank_env as _env

WORKERS = ROOT / "tests" / "_dist_workers.py"

pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="needs torch.distributed with Gloo",
)


def launch(scenario, **kwargs):
    """Runs ``scenario`` of tests/_dist_workers.py, one process per rank."""
    return _launch(WORKERS, [scenario], **kwargs)


def test_backend_registered():
    import torch.distributed as dist

    import torch_emu.distributed as ed

    assert ed.BACKEND_NAME == "emu_gloo"
    assert "emu_gloo" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["emu"] == "emu_gloo"
    assert dist.Backend.backend_capability["emu_gloo"] == ["emu"]


def test_collectives_match_gloo_env():
    assert_ok(launch("collectives"))


def test_collectives_match_gloo_tcp_init():
    assert_ok(launch("collectives_tcp"))


@pytest.mark.launch_mode
def test_async_work_orders_with_streams():
    assert_ok(launch("async_streams"))


@pytest.mark.parametrize("scenario", ["collectives", "async_streams"])
def test_strict_mode_stages_through_copies(scenario):
    # the host may not touch device memory here: zero-copy views would crash
    assert_ok(launch(scenario, extra_env={"TORCH_EMU_STRICT": "1", "EMU_TEST_EXPECT_STRICT": "1"}))


def test_mixed_cpu_gloo_and_emu_backends():
    assert_ok(launch("mixed_backends"))


def test_ddp_matches_single_process():
    assert_ok(launch("ddp"))


def test_fsdp2_mlp_transformer_block_and_checkpoint():
    assert_ok(launch("fsdp2", timeout=58))


def test_dead_rank_raises_within_timeout():
    start = time.monotonic()
    results = launch("dies", timeout=50, extra_env={"EMU_TEST_PG_TIMEOUT": "5"})
    assert time.monotonic() - start < 45
    rc0, out0, err0 = results[0]
    assert rc0 == 3 and "RAISED" in out0, (rc0, out0, err0[-3000:])


def test_lost_device_on_one_rank_fails_both_ranks_within_timeout():
    results = launch("device_lost", timeout=50, extra_env={"EMU_TEST_PG_TIMEOUT": "5"})
    (rc0, out0, err0), (rc1, out1, err1) = results
    assert rc1 == 3 and "AcceleratorError" in out1 and "device was lost" in out1, (rc1, out1, err1[-3000:])
    assert rc0 == 3 and "RAISED" in out0, (rc0, out0, err0[-3000:])


def test_stalled_rank_raises_within_timeout():
    port = free_port()
    env = {"EMU_TEST_PG_TIMEOUT": "4"}
    procs = [subprocess.Popen([sys.executable, str(WORKERS), "stalls"], env=_env(r, 2, port, env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        out, err = procs[0].communicate(timeout=45)
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    assert procs[0].returncode == 3 and "RAISED" in out, (out, err[-3000:])
    seconds = float(out.split("RAISED after ")[1].split("s")[0])
    assert 3 <= seconds < 20, out


def test_rank_that_never_joins_times_out():
    results = launch("never_joins", ranks=[0], timeout=50, extra_env={"EMU_TEST_PG_TIMEOUT": "4"})
    rc, out, err = results[0]
    assert rc == 3 and "RAISED" in out, (rc, out, err[-3000:])


def test_wrong_device_and_shapes_give_clear_errors():
    results = launch("wrong_inputs")
    assert_ok(results)
    assert "CPU tensor" in results[0][1]


def test_torchrun_ddp_example():
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--max-restarts", "0",
           str(ROOT / "examples" / "ddp_emu.py"), "--steps", "3"]
    env = _env(0, 1, port)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=55)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert "replicas identical: True" in r.stdout, r.stdout
