"""The memory format of a fake convolution on emu: CPU's, as emu's kernel answers.

torch.compile and torch.export run every operator first on fake tensors, and Inductor asserts
that each real result has the fake's strides. PyTorch's fake convolution asks the backend it
would select for the device what memory format its result has; for an out-of-tree device that
is the "overrideable" backend, which answers contiguous whatever the inputs. Emu's convolution
is CPU's kernel (csrc/aten/kernels/EmuConvolution.cpp), which, like CUDA's, answers channels
last for a channels-last input or weight, and PyTorch's own module tests expect that of every
device. So on emu the fake asks CPU: it runs PyTorch's own fake convolution on CPU twins of
the arguments (same sizes, strides and dtypes) and gives their results' strides to emu
tensors. Fake convolutions of every other device run PyTorch's rule untouched.
"""

import functools

import torch
from torch._subclasses import fake_impls
from torch.utils._pytree import tree_leaves, tree_map

aten = torch.ops.aten
# PyTorch's fake convolution is registered for these four (fake_impls.conv).
CONVOLUTIONS = (aten.convolution.default, aten._convolution.default, aten._convolution.deprecated,
                aten.convolution_backward.default)


# LITERALINCLUDE START: FAKE_CONVOLUTION
def _emu_device(args, kwargs) -> torch.device | None:
    """The one emu device of all the tensor arguments; None when any is elsewhere (PyTorch's
    rule then also reports tensors on different devices, as it does for every device)."""
    devices = {t.device for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
    device = devices.pop() if len(devices) == 1 else None
    return device if device is not None and device.type == "emu" else None


def _twin(t, device):
    """A fake tensor like `t` (sizes, strides, dtype) on `device`; anything else as it is."""
    if not isinstance(t, torch.Tensor):
        return t
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)


def install() -> None:
    pytorch_conv = fake_impls.op_implementations_dict[CONVOLUTIONS[0]]
    if getattr(pytorch_conv, "emu_asks_cpu", False):
        return

    @functools.wraps(pytorch_conv)
    def conv_on_emu_as_on_cpu(fake_mode, func, *args, **kwargs):
        device = _emu_device(args, kwargs)
        if device is None:
            return pytorch_conv(fake_mode, func, *args, **kwargs)
        with fake_mode:
            cpu_args, cpu_kwargs = tree_map(lambda t: _twin(t, "cpu"), (args, kwargs))
            out = pytorch_conv(fake_mode, func, *cpu_args, **cpu_kwargs)
            return tree_map(lambda t: _twin(t, device), out)

    conv_on_emu_as_on_cpu.emu_asks_cpu = True
    for op in CONVOLUTIONS:
        fake_impls.op_implementations_dict[op] = conv_on_emu_as_on_cpu
# LITERALINCLUDE END: FAKE_CONVOLUTION
