"""Faults injected on purpose, ``torch.emu.faults``: the device runs out of
memory, a kernel or a copy fails, the device is lost, when a test says so.

Each fault is made by the runtime (``csrc/runtime/faults.cpp``) and reaches
PyTorch through the same paths as the real failure: ``torch.OutOfMemoryError``
from the caching allocator, ``torch.AcceleratorError`` from a launch, a copy or
the next synchronisation. For whole programs, ``TORCH_EMU_FAULTS`` arms faults
when emu starts, e.g. ``TORCH_EMU_FAULTS="oom:limit=64MiB;kernel:after=100"``.
"""

import os

from .. import _C
from ..runtime.config import parse_bytes

__all__ = ["Fault", "inject", "remove_all", "KINDS"]

# LITERALINCLUDE START: FAULT_API
KINDS = ("oom", "kernel", "copy", "device_lost")


class Fault:
    """An armed fault. ``hits`` counts the calls it made fail so far;
    ``remove()``, or leaving its ``with`` block, disarms it."""

    def __init__(self, kind: str, fault_id: int) -> None:
        self.kind = kind
        self.id = fault_id
        self._hits_at_removal: int | None = None

    @property
    def hits(self) -> int:
        return self._hits_at_removal if self._hits_at_removal is not None else _C._fault_hits(self.id)

    def remove(self) -> None:
        if self._hits_at_removal is None:
            self._hits_at_removal = _C._fault_hits(self.id)
            _C._fault_remove(self.id)

    def __enter__(self) -> "Fault":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"Fault({self.kind!r}, id={self.id}, hits={self.hits})"


def inject(kind: str, *, after: int = 0, times: int | None = None, device=None, limit: int | None = None,
           op: str | None = None) -> Fault:
    """Arms a fault of ``kind`` on ``device`` (default: every device).

    The fault lets ``after`` matching calls succeed, then makes ``times`` of
    them fail (``0``: every one from then on; default 1, or 0 with ``limit``):

    - ``"oom"``: a device allocation (``emuMalloc``) fails with
      ``torch.OutOfMemoryError``. The caching allocator frees its cache and
      tries once more before it raises, so a single failure (``times=1``) is
      absorbed when the cache held memory. ``limit`` (bytes) makes only the
      allocations fail that would take the device's memory above it: a smaller
      device.
    - ``"kernel"``: a kernel launch fails with ``torch.AcceleratorError``: at
      the launch when the launch waits for its kernel, else (a queued kernel)
      at the stream's next synchronisation, an asynchronous error. The device
      stays usable. ``op`` counts only the kernels whose name contains it: a
      native kernel is named after its CPU code (``at::native::structured_mul_out``),
      a fallback kernel after its operator (``aten::mul``); a kernel captured
      into a graph keeps its name, at capture and at every replay.
    - ``"copy"``: a copy to, from or between devices fails with
      ``torch.AcceleratorError`` (an uncorrectable memory error), copying nothing.
    - ``"device_lost"``: at a kernel launch the device is lost for good: that
      launch and every later call fail with ``torch.AcceleratorError``, in this
      process, until it exits (freeing memory still works).

    ``after``, ``times`` and ``limit`` are whole numbers up to 2**63-1; a bad
    argument raises ValueError naming it, before anything is armed.
    """
    problem = _problem(kind, after, times, limit, op)
    if problem:
        raise ValueError(f"torch.emu.faults.inject: {problem}")
    from . import _initialized_device_index, _lazy_init

    _lazy_init()
    index = -1 if device is None else _initialized_device_index(device, optional=False)
    return _arm(kind, after=after, times=times, device=index, limit=limit, op=op)


def remove_all() -> None:
    """Disarms every fault (a lost device stays lost)."""
    _C._fault_remove(-1)
# LITERALINCLUDE END: FAULT_API


def _problem(kind: str, after: int, times: int | None, limit: int | None, op: str | None) -> str | None:
    """What is wrong with these arguments of inject(), if anything."""
    from . import _whole_number_problem

    if kind not in KINDS:
        return f"unknown fault kind {kind!r}; expected one of {KINDS}"
    if op is not None and (kind != "kernel" or not isinstance(op, str) or not op):
        return f"op is a non-empty name, for kind 'kernel' only; got op={op!r} for kind {kind!r}"
    if limit is not None and kind != "oom":
        return "limit is a positive byte count, for kind 'oom' only"
    problem = _whole_number_problem("after", after, 0)
    for name, value, low in (("times", times, 0), ("limit", limit, 1)):
        if problem is None and value is not None:
            problem = _whole_number_problem(name, value, low)
    return problem


def _arm(kind: str, *, after: int = 0, times: int | None = None, device: int = -1, limit: int | None = None,
         op: str | None = None) -> Fault:
    """inject() on checked arguments, without starting emu (-1: every device)."""
    if times is None:
        times = 0 if limit is not None else 1
    return Fault(kind, _C._fault_inject(KINDS.index(kind), device, after, times, limit or 0, op or ""))


def _bad(entry: str, problem: str) -> ValueError:
    return ValueError(f"TORCH_EMU_FAULTS: {problem} (in {entry!r})")


def _parse(spec: str, device_count: int) -> list[dict]:
    """``kind[:key=value,...];...`` -> keyword arguments of _arm(), checked:
    a ValueError names the variable, the entry and the field."""
    faults = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        kind, _, options = part.partition(":")
        kwargs = {"kind": kind.strip()}
        for option in filter(None, (o.strip() for o in options.split(","))):
            key, sep, value = (text.strip() for text in option.partition("="))
            if key in ("after", "times", "device") and sep:
                if not value.isdigit():
                    raise _bad(part, f"{key}={value!r} is not a whole number")
                kwargs[key] = int(value)
            elif key == "limit" and sep:
                try:
                    kwargs["limit"] = parse_bytes(value, "limit")
                except ValueError:
                    raise _bad(part, f"limit={value!r} is not a size such as 512MiB") from None
            elif key == "op" and sep:
                kwargs["op"] = value
            else:
                raise _bad(part, f"unknown option {option!r}; expected after=N, times=N, device=N, limit=SIZE "
                                 "or op=NAME")
        if kwargs.get("device", 0) >= device_count:
            raise _bad(part, f"device={kwargs['device']} is out of range: there are {device_count} emu devices, "
                             f"0 to {device_count - 1}")
        problem = _problem(kwargs["kind"], kwargs.get("after", 0), kwargs.get("times"), kwargs.get("limit"),
                           kwargs.get("op"))
        if problem:
            raise _bad(part, problem)
        faults.append(kwargs)
    return faults


def _arm_from_environment(device_count: int) -> None:
    """Arms the faults TORCH_EMU_FAULTS names (when emu starts): all checked
    before the first is armed."""
    for kwargs in _parse(os.environ.get("TORCH_EMU_FAULTS", ""), device_count):
        _arm(kwargs.pop("kind"), **kwargs)
