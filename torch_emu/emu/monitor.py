"""Device monitoring of ``torch.emu``, as ``torch.cuda`` offers it through
NVML: how busy the device was (measured by the runtime over its sampling
period) and which processes hold its memory."""

import os
from typing import Any

from . import _initialized_device_index  # defined before this module is imported
from .. import _C

__all__ = ["utilization", "memory_usage", "list_gpu_processes"]


# LITERALINCLUDE START: PY_MONITOR
def utilization(device: Any = None) -> int:
    """Percent of the past sample period (about one second) during which one
    or more kernels was executing on ``device``, as measured by the runtime."""
    return _C._utilization(_initialized_device_index(device))[0]


def memory_usage(device: Any = None) -> int:
    """Percent of the past sample period during which ``device``'s memory was
    being read or written: by a kernel, or by a copy to, from or within it."""
    return _C._utilization(_initialized_device_index(device))[1]
# LITERALINCLUDE END: PY_MONITOR


def list_gpu_processes(device: Any = None) -> str:
    """The processes holding memory of ``device`` and how much, in
    ``torch.cuda.list_gpu_processes``'s format. Emu device memory belongs to
    the process that mapped it, so that is this process, when it holds any."""
    from .memory import mem_get_info

    index = _initialized_device_index(device)
    free, total = mem_get_info(index)
    lines = [f"emu:{index}"]
    if total == free:
        lines.append("no processes are running")
    else:
        lines.append(f"process {os.getpid():>10d} uses {(total - free) / (1024 * 1024):>12.3f} MB emu memory")
    return "\n".join(lines)
