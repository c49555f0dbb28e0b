"""Named tensors on emu behave exactly as on CPU.

PyTorch 2.13 removed named tensors (pytorch/pytorch#173895): the ``names=``
overloads of the factories, ``Dimname`` overloads such as ``sum("C")``, and
``Tensor.names``/``rename``/``refine_names``/``align_to`` are gone from the
Python bindings and from ATen, so ``torch.empty(2, 3, names=("N", "C"))``
raises ``TypeError`` in PyTorch's argument parser before any backend is
reached, on CPU as on emu. Each case below runs on both devices and requires
the same outcome: the same exception type and message, or (should a future
PyTorch bring names back) equal results with equal names.
"""

import pytest
import torch

pytestmark = pytest.mark.usefixtures("baseline_memory")

NAMES = ("N", "C")


def _outcome(fn, device):
    try:
        result = fn(device)
    except Exception as error:  # the outcome under test is the exception itself
        return "raised", type(error), str(error)
    return "returned", result


def _assert_same_on_cpu_and_emu(fn, compare_values=True):
    cpu = _outcome(fn, "cpu")
    emu = _outcome(fn, "emu")
    assert cpu[0] == emu[0], f"CPU {cpu} but emu {emu}"
    if cpu[0] == "raised":
        assert emu[1:] == cpu[1:]
        return
    expected, actual = cpu[1], emu[1]
    assert actual.device.type == "emu"
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert getattr(actual, "names", None) == getattr(expected, "names", None)
    if compare_values:
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


FACTORIES = {
    "empty": (lambda d: torch.empty(2, 3, names=NAMES, device=d), False),
    "zeros": (lambda d: torch.zeros(2, 3, names=NAMES, device=d), True),
    "ones": (lambda d: torch.ones(2, 3, names=NAMES, device=d), True),
    "full": (lambda d: torch.full((2, 3), 1.5, names=NAMES, device=d), True),
    "rand": (lambda d: torch.rand(2, 3, names=NAMES, device=d), False),
    "randn": (lambda d: torch.randn(2, 3, names=NAMES, device=d), False),
    "empty_names_none": (lambda d: torch.empty(2, 3, names=None, device=d), False),
    "zeros_dtype": (lambda d: torch.zeros(2, 3, names=NAMES, dtype=torch.int64, device=d), True),
    "ones_half": (lambda d: torch.ones(2, 3, names=NAMES, dtype=torch.float16, device=d), True),
    "tensor": (lambda d: torch.tensor([[1.0, 2.0]], names=NAMES, device=d), True),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_with_names(name):
    fn, compare_values = FACTORIES[name]
    _assert_same_on_cpu_and_emu(fn, compare_values)


NAMED_OPS = {
    "names": lambda d: torch.ones(2, 3, device=d).names,
    "rename": lambda d: torch.ones(2, 3, device=d).rename("N", "C"),
    "refine_names": lambda d: torch.ones(2, 3, device=d).refine_names("N", "C"),
    "align_to": lambda d: torch.ones(2, 3, device=d).align_to("C", "N"),
    "sum_by_name": lambda d: torch.ones(2, 3, device=d).sum("C"),
    "mean_by_name": lambda d: torch.ones(2, 3, device=d).mean("C"),
    "softmax_by_name": lambda d: torch.ones(2, 3, device=d).softmax("C"),
    "size_by_name": lambda d: torch.ones(2, 3, device=d).size("C"),
    "flatten_by_names": lambda d: torch.ones(2, 3, 4, device=d).flatten(["C", "H"], "CH"),
    "to_emu_keeps_names": lambda d: torch.ones(2, 3, names=NAMES).to(d),
}


@pytest.mark.parametrize("name", sorted(NAMED_OPS))
def test_named_operations(name):
    _assert_same_on_cpu_and_emu(NAMED_OPS[name])


# Bad inputs of the named API: wrong number of names, duplicates, non-string
# names, names for a 0-dim tensor, a misaligned sum of two named tensors.
BAD = {
    "too_few_names": lambda d: torch.zeros(2, 3, names=("N",), device=d),
    "duplicate_names": lambda d: torch.zeros(2, 3, names=("N", "N"), device=d),
    "non_string_name": lambda d: torch.zeros(2, 3, names=("N", 1), device=d),
    "scalar_with_names": lambda d: torch.zeros((), names=("N",), device=d),
    "misaligned_add": lambda d: torch.ones(2, 3, names=("N", "C"), device=d) + torch.ones(2, 3, names=("C", "N"), device=d),
    "unknown_dim_name": lambda d: torch.ones(2, 3, device=d).sum("W"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_named_inputs(name):
    cpu = _outcome(BAD[name], "cpu")
    assert cpu[0] == "raised"  # invalid with or without named tensor support
    _assert_same_on_cpu_and_emu(BAD[name])


def test_emu_adds_no_named_tensor_api():
    cpu, emu = torch.ones(2, 3), torch.ones(2, 3, device="emu")
    for attribute in ("names", "rename", "rename_", "refine_names", "align_to", "align_as", "has_names"):
        assert hasattr(emu, attribute) == hasattr(cpu, attribute), attribute


def test_positional_dims_still_work_like_cpu():
    # What replaces named dimensions: plain dims give the same results on emu.
    x = torch.arange(24.0).reshape(2, 3, 4)
    y = x.to("emu")
    torch.testing.assert_close(y.sum(1).cpu(), x.sum(1))
    torch.testing.assert_close(y.permute(2, 0, 1).cpu(), x.permute(2, 0, 1))
    torch.testing.assert_close(y.flatten(1, 2).cpu(), x.flatten(1, 2))
    torch.testing.assert_close(y.unflatten(2, (2, 2)).cpu(), x.unflatten(2, (2, 2)))
