"""What the host can validate raises at the call, as on CPU and CUDA, in every launch mode.

A kernel may run after its launch returned (queued launches, the default), but
the arguments are checked before: a bad shape, broadcast, dtype, overlap or
device, or a dtype the kernel lacks, raises at the call with CPU's exception
type and message, for copies, ops that run through the fallback, native
structured ops (functional and in-place) and the foreach ops. Only what a kernel finds in the data (an index
out of range) is reported at the next synchronisation, as on CUDA. Warnings a
kernel raises reach Python once, from the line of the call.

The cases run in this process's launch mode (CI runs the suite in each) and,
in a subprocess each, queued and blocking.
"""

import inspect
import os
import warnings

import pytest
import torch
import torch.nn.functional as F

from _after_import import run_after_import

pytestmark = pytest.mark.launch_mode

# LITERALINCLUDE START: TEST_AT_THE_CALL
# Each case makes its tensors on `device` and does one bad thing.
CASES = {
    "copy_ shape": lambda d: torch.zeros(1, device=d).copy_(torch.ones(2, 1, 2, 1, device=d)),
    "copy_ into overlapping": lambda d: torch.zeros(1, device=d).expand(3).copy_(torch.ones(3, device=d)),
    "copy_ partial overlap": lambda d: (lambda x: x[1:].copy_(x[:-1]))(torch.arange(6.0, device=d)),
    "copy_ strided shape": lambda d: torch.zeros(4, 4, device=d).t().copy_(torch.ones(3, device=d)),
    "copy_ from host shape": lambda d: torch.zeros(1, device=d).copy_(torch.ones(2, 1)),
    "copy_ to host shape": lambda d: torch.zeros(1).copy_(torch.ones(2, 1, device=d)),
    "fallback op": lambda d: torch.kthvalue(torch.ones(3, device=d), 5),
    "fallback op, bad dim": lambda d: torch.cumsum(torch.ones(3, device=d), dim=4),
    "structured op": lambda d: torch.ones(3, device=d) + torch.ones(4, device=d),
    "structured op, matmul": lambda d: torch.ones(3, 4, device=d) @ torch.ones(3, 4, device=d),
    "matmul dtypes": lambda d: torch.ones(2, 3, dtype=torch.short, device=d) @ torch.ones(3, 2, device=d),
    "batched matmul dtypes": lambda d: torch.bmm(torch.ones(2, 2, 3, dtype=torch.double, device=d),
                                                 torch.ones(2, 3, 2, device=d)),
    "in-place broadcast": lambda d: torch.ones(3, device=d).add_(torch.ones(2, 3, device=d)),
    "in-place dtype": lambda d: torch.ones(3, dtype=torch.int, device=d).exp_(),
    "in-place overlap": lambda d: torch.ones(1, device=d).expand(3).mul_(2),
    "foreach shape": lambda d: torch._foreach_add_([torch.ones(2, device=d)], [torch.ones(3, device=d)]),
    "foreach scalar list": lambda d: torch._foreach_add_([torch.ones(2, device=d)] * 2, [1.0]),
    "foreach dtype": lambda d: torch._foreach_div_([torch.ones(2, dtype=torch.long, device=d)], 2),
    "foreach complex scalar": lambda d: torch._foreach_mul_([torch.ones(2, device=d)], 1j),
    "dtype the kernel lacks": lambda d: torch.tensor([1j], device=d) < torch.tensor([2j], device=d),
    "dtype the kernel lacks, in-place": lambda d: torch.ones(3, dtype=torch.chalf, device=d).lt_(1),
    "cat": lambda d: torch.cat([torch.ones(3, device=d), torch.ones(2, 2, device=d)]),
    "layer_norm weight": lambda d: F.layer_norm(torch.ones(2, 3, device=d), (3,), torch.ones(4, device=d)),
}


def outcome(case, device):
    """What the call raised (type and message), with nothing synchronised."""
    try:
        CASES[case](device)
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return type(e), str(e).split("\n")[0]
    return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_raises_at_the_call_like_cpu(case, baseline_memory):
    expected = outcome(case, "cpu")
    assert expected is not None, "each case is an error on CPU"
    assert outcome(case, "emu") == expected
    torch.emu.synchronize()  # nothing was left to report later
# LITERALINCLUDE END: TEST_AT_THE_CALL


@pytest.mark.parametrize("mode", ["TORCH_EMU_LAUNCH_QUEUED", "TORCH_EMU_LAUNCH_BLOCKING"])
def test_every_case_in_another_launch_mode(mode):
    r = run_after_import(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import torch, test_host_checks as t
        bad = [c for c in t.CASES if t.outcome(c, "emu") != t.outcome(c, "cpu")]
        torch.emu.synchronize()
        print("differ:", bad)
        """,
        **{mode: "1"},
    )
    assert r.returncode == 0, r.stderr
    assert "differ: []" in r.stdout, r.stdout


def test_errors_in_the_data_are_reported_at_the_next_sync(baseline_memory):
    # What only the kernel can see (an index out of range) is asynchronous on
    # CUDA too; the device keeps working after it is reported.
    x = torch.ones(3, device="emu")
    with pytest.raises((IndexError, RuntimeError)):
        x.index_select(0, torch.tensor([5], device="emu"))
        torch.emu.synchronize()
    assert (x * 2).sum().item() == 6


# LITERALINCLUDE START: TEST_HOST_INDICES
def test_host_indices_work_but_a_host_tensor_is_not_indexed_on_emu():
    x = torch.arange(12.0).view(3, 4)
    index = torch.tensor([0, 2, 1])
    assert torch.equal(x.to("emu")[index].cpu(), x[index])  # CPU indices, as on CUDA
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same device as the indexed "
                                           r"tensor \(cpu\)"):
        x[index.to("emu")]
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu .* \(cpu\)"):
        x[index.cpu(), index.to("emu")]  # mixed host and emu indices (as PyTorch's test)
    with pytest.raises(RuntimeError, match="indices should be either on cpu"):
        x.index_put_((index.to("emu"),), torch.zeros(4, device="emu"))
    # Values to put must be on the device, unless a 0-dim scalar.
    y = x.to("emu")
    y[index] = torch.tensor(7.0)
    assert (y[index] == 7).all().item()
    with pytest.raises(RuntimeError, match="same device"):
        y.index_put_((index,), torch.zeros(3, 4))
# LITERALINCLUDE END: TEST_HOST_INDICES


def test_zero_dim_host_tensors_are_scalars():
    x = torch.arange(3.0, device="emu")
    assert (x * torch.tensor(2.0)).tolist() == [0.0, 2.0, 4.0]
    assert torch.where(x > 0, x, torch.tensor(-1.0)).tolist() == [-1.0, 1.0, 2.0]
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(3)


def _warn_by_resizing_out(device):
    out = torch.empty(5, device=device)
    torch.arange(0, 3, out=out)  # resizes a non-empty out=: CPU's kernel warns


@pytest.mark.parametrize("device", ["cpu", "emu"])
def test_a_kernels_warning_reaches_python_once_from_the_call(device):
    line = inspect.getsourcelines(_warn_by_resizing_out)[1] + 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _warn_by_resizing_out(device)
        torch.emu.synchronize()
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert caught[0].lineno == line and caught[0].filename == __file__
    assert "Triggered internally at" in str(caught[0].message)


@pytest.fixture
def warn_always():
    """TORCH_WARN_ONCE warnings every time (as PyTorch's own tests set them)."""
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    yield
    torch.set_warn_always(before)


def test_complex_to_real_copy_warns_once_per_copy(warn_always):
    for device in ["cpu", "emu"]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            z = torch.tensor([1 + 2j, 3 - 1j], device=device)
            real = torch.zeros(2, device=device)
            real.copy_(z)
            real[::1].copy_(z.conj())
            torch.zeros(2).copy_(z)
            torch.emu.synchronize()
        assert len(caught) == 3, (device, [str(w.message) for w in caught])
        assert real.tolist() == [1.0, 3.0]

