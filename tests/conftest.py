import gc

import pytest
import torch

import torch_emu  # noqa: F401  (also loaded by autoload; explicit for clarity)


@pytest.fixture
def baseline_memory():
    """Asserts that a test leaves allocated emu memory where it found it."""
    torch.emu.synchronize()
    gc.collect()
    before = [torch.emu.memory_allocated(i) for i in range(torch.emu.device_count())]
    yield
    gc.collect()
    for i in range(torch.emu.device_count()):
        torch.emu.synchronize(i)
    after = [torch.emu.memory_allocated(i) for i in range(torch.emu.device_count())]
    assert after == before, f"emu memory leaked: {before} -> {after}"
