"""Scenario 3 in Python: custom operators.

* ``emu_py::scaled_gelu``: the twin of the C++ ``emu::scaled_gelu``
  (csrc/CustomOps.cpp beside this package), defined with ``torch.library.custom_op``
  with a fake (meta) kernel and autograd, so it works under ``torch.compile``.
* ``emu::clamped_scaled_gelu``: an operator added from Python to the ``emu``
  namespace that C++ created.
* ``emu::linear_relu_py``: the twin of scenario 4, a ``torch.autograd.Function``
  as the ``AutogradPrivateUse1`` kernel of an operator.
"""

import torch
import torch.nn.functional as F

# LITERALINCLUDE START: PY_CUSTOM_OP
@torch.library.custom_op("emu_py::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    """scale * gelu(x). The default kernel, for every device: ordinary
    operators, which on emu run through the fallback."""
    return F.gelu(x.contiguous()) * scale


@scaled_gelu.register_kernel("emu")
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    # A device-specific kernel. It calls the native emu kernel of the C++ op:
    # one launch instead of two.
    return torch.ops.emu.scaled_gelu(x, scale)


@scaled_gelu.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    # The meta kernel: output shape, dtype and strides, no data.
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    x, scale = inputs
    ctx.save_for_backward(x)
    ctx.scale = scale


def _backward(ctx, grad: torch.Tensor):
    (x,) = ctx.saved_tensors
    return torch.ops.aten.gelu_backward(grad, x) * ctx.scale, None  # no gradient for scale


scaled_gelu.register_autograd(_backward, setup_context=_setup_context)
# LITERALINCLUDE END: PY_CUSTOM_OP

# LITERALINCLUDE START: PY_EXTEND_NAMESPACE
# "FRAGMENT" adds to a namespace defined elsewhere (here by TORCH_LIBRARY(emu)
# in C++); "DEF" would claim a new namespace, which only one library may do.
emu_lib = torch.library.Library("emu", "FRAGMENT")
emu_lib.define("clamped_scaled_gelu(Tensor x, float scale, float limit) -> Tensor")


def _clamped_scaled_gelu(x: torch.Tensor, scale: float, limit: float) -> torch.Tensor:
    return torch.ops.emu.scaled_gelu(x, scale).clamp_max(limit)


# CompositeImplicitAutograd: a decomposition into other operators, for every
# device. Autograd, meta and torch.compile all come from the operators it
# calls, so nothing else needs registering.
emu_lib.impl("clamped_scaled_gelu", _clamped_scaled_gelu, "CompositeImplicitAutograd")
# LITERALINCLUDE END: PY_EXTEND_NAMESPACE

# LITERALINCLUDE START: PY_AUTOGRAD_FUNCTION
emu_lib.define("linear_relu_py(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor")


def _linear_relu_kernel(x, weight, bias=None):
    return F.linear(x, weight, bias).relu()


emu_lib.impl("linear_relu_py", _linear_relu_kernel, "PrivateUse1")
emu_lib.impl("linear_relu_py", _linear_relu_kernel, "CPU")


class _LinearRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        with torch._C._AutoDispatchBelowAutograd():  # to the device kernel
            out = torch.ops.emu.linear_relu_py(x, weight, bias)
        ctx.save_for_backward(x, weight, out)
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, out = ctx.saved_tensors
        grad = grad * (out > 0)
        grad_2d = grad.reshape(-1, weight.shape[0])
        grad_b = grad_2d.sum(0) if ctx.has_bias else None
        return grad @ weight, grad_2d.t() @ x.reshape(-1, weight.shape[1]), grad_b


def _linear_relu_autograd(x, weight, bias=None):
    return _LinearRelu.apply(x, weight, bias)


emu_lib.impl("linear_relu_py", _linear_relu_autograd, "AutogradPrivateUse1")
emu_lib.impl("linear_relu_py", _linear_relu_autograd, "AutogradCPU")
# LITERALINCLUDE END: PY_AUTOGRAD_FUNCTION
