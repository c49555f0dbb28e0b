"""The ``torch.cuda`` names that cannot apply to the emulated device.

Each still exists on ``torch.emu`` with ``torch.cuda``'s signature, so code
that calls it fails at the call with the reason, not with an AttributeError.
``tests/test_cuda_parity.py`` checks every other public ``torch.cuda`` name
exists on ``torch.emu``.
"""

from typing import Any

__all__ = [
    "CannotApplyOnEmu",
    "NOT_APPLICABLE",
    "GreenContext",
    "clock_rate",
    "current_blas_handle",
    "current_solver_handle",
    "get_gencode_flags",
    "power_draw",
    "temperature",
]

# LITERALINCLUDE START: NOT_APPLICABLE
_NO_SENSORS = "the emulated device has no sensors of its own (its kernels run on the host's CPUs)"

NOT_APPLICABLE: dict[str, str] = {
    "temperature": _NO_SENSORS,
    "power_draw": _NO_SENSORS,
    "clock_rate": _NO_SENSORS + "; get_device_properties().clock_rate gives the host CPU's maximum clock",
    "current_blas_handle": "emu's matmuls run PyTorch's CPU BLAS, which has no library handle",
    "current_solver_handle": "emu's linear algebra runs PyTorch's CPU LAPACK, which has no library handle",
    "get_gencode_flags": "emu kernels are host code built by the host compiler; there is no device code "
    "generation to pass flags to (get_arch_list names the architecture)",
    "GreenContext": "emu kernels run on PyTorch's process-wide CPU thread pool, which has no partitions "
    "to give a context",
}
# LITERALINCLUDE END: NOT_APPLICABLE


class CannotApplyOnEmu(RuntimeError):
    """Raised by a ``torch.cuda`` name that has no meaning on the emulated device."""


def _cannot_apply(name: str) -> CannotApplyOnEmu:
    return CannotApplyOnEmu(f"torch.emu.{name} cannot apply on emu: {NOT_APPLICABLE[name]}")


def temperature(device: Any = None) -> int:
    raise _cannot_apply("temperature")


def power_draw(device: Any = None) -> int:
    raise _cannot_apply("power_draw")


def clock_rate(device: Any = None) -> int:
    raise _cannot_apply("clock_rate")


def current_blas_handle() -> int:
    raise _cannot_apply("current_blas_handle")


def current_solver_handle() -> int:
    raise _cannot_apply("current_solver_handle")


def get_gencode_flags() -> str:
    raise _cannot_apply("get_gencode_flags")


class GreenContext:
    @staticmethod
    def create(*, num_sms=None, workqueue_scope=None, workqueue_concurrency_limit=None, device_id=None):
        raise _cannot_apply("GreenContext")

    @staticmethod
    def max_workqueue_concurrency(device_id=None) -> int:
        raise _cannot_apply("GreenContext")

    def __new__(cls):
        raise _cannot_apply("GreenContext")
