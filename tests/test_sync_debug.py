"""torch.emu.set_sync_debug_mode: operations that make the host wait for the
device warn or raise, naming the operation; everything else stays silent."""

import warnings

import pytest
import torch

pytestmark = pytest.mark.launch_mode


@pytest.fixture
def mode():
    yield torch.emu.set_sync_debug_mode
    torch.emu.set_sync_debug_mode("default")


SYNCING = {
    "item": lambda x: x.sum().item(),
    "cpu": lambda x: x.cpu(),
    "to_emu": lambda x: torch.ones(3).to("emu"),
    "nonzero": lambda x: x.nonzero(),
    "bool_mask_index": lambda x: x[x > 0],
    "masked_select": lambda x: x.masked_select(x > 0),
    "unique": lambda x: torch.unique(x),
    "tolist": lambda x: x.tolist(),
}


@pytest.mark.parametrize("name", SYNCING)
def test_syncing_ops_warn_and_raise(name, mode, baseline_memory):
    x = torch.randn(4, 4, device="emu")
    mode("warn")
    with pytest.warns(UserWarning, match="called a synchronizing emu operation"):
        SYNCING[name](x)
    mode("error")
    with pytest.raises(RuntimeError, match="called a synchronizing emu operation"):
        SYNCING[name](x)
    del x


def test_non_syncing_work_is_silent(mode, baseline_memory):
    x = torch.randn(64, 64, device="emu")
    pinned = torch.empty(64, 64).pin_memory()
    mode("error")
    y = (x @ x).relu().sum(0)
    pinned.copy_(x, non_blocking=True)  # queued on the stream
    x.copy_(pinned, non_blocking=True)
    torch.emu.synchronize()  # explicit waits are not reported
    torch.emu.current_stream().synchronize()
    e = torch.emu.Event()
    e.record()
    e.synchronize()
    mode("default")
    torch.testing.assert_close(pinned, x.cpu())
    del x, y, pinned


def test_default_mode_is_silent_and_modes_round_trip(mode):
    assert torch.emu.get_sync_debug_mode() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.ones(2, device="emu").sum().item()
    for value, number in (("warn", 1), ("error", 2), ("default", 0), (1, 1), (0, 0)):
        mode(value)
        assert torch.emu.get_sync_debug_mode() == number


def test_bad_modes_are_clear_errors(mode):
    with pytest.raises(RuntimeError, match="expected one of `default`, `warn`, `error`"):
        mode("loud")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        mode(5)
    assert torch.emu.get_sync_debug_mode() == 0
