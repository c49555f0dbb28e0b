"""Dynamo's view of the emu device: a ``DeviceInterface`` that delegates every
call to ``torch.emu`` (which mirrors ``torch.cuda``).

Dynamo asks this interface which ``Stream``/``Event`` classes and which
``stream()``/``current_stream()`` functions belong to the device, so that
``with torch.emu.stream(s):`` and ``torch.emu.current_stream()`` are traced
into the graph instead of breaking it; Inductor asks it for the device count,
the current device, device properties, synchronisation and timing events
(benchmarking, max-autotune).
"""

from typing import Any

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
    register_interface_for_device,
)

emu = torch.emu


# LITERALINCLUDE START: DEVICE_INTERFACE
class EmuInterface(DeviceInterface):
    device = emu.device
    # Dynamo only captures streams and events that subclass torch.Stream and
    # are torch.Event: torch.emu.Stream is one, torch.emu.Event returns one.
    Event = emu.Event
    Stream = emu.Stream

    class Worker:
        """Device queries for Inductor's compile workers, which must not start
        the device runtime: answered from values cached in the parent."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices["emu"] = device

        @staticmethod
        def current_device() -> int:
            if "emu" in caching_worker_current_devices:
                return caching_worker_current_devices["emu"]
            return emu.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if "emu" not in caching_worker_device_properties:
                caching_worker_device_properties["emu"] = [
                    emu.get_device_properties(i) for i in range(emu.device_count())
                ]
            index = EmuInterface.Worker.current_device() if device is None else emu._get_device_index(device)
            return caching_worker_device_properties["emu"][index]

    current_device = staticmethod(emu.current_device)
    set_device = staticmethod(emu.set_device)
    device_count = staticmethod(emu.device_count)
    is_available = staticmethod(emu.is_available)
    stream = staticmethod(emu.stream)
    current_stream = staticmethod(emu.current_stream)
    set_stream = staticmethod(emu.set_stream)
    synchronize = staticmethod(emu.synchronize)
    get_device_properties = staticmethod(emu.get_device_properties)
    memory_allocated = staticmethod(emu.memory_allocated)
    is_bf16_supported = staticmethod(emu.is_bf16_supported)

    @staticmethod
    def exchange_device(device: int) -> int:
        """Makes ``device`` current; returns the previous current device."""
        if device < 0:
            return -1
        previous = emu.current_device()
        if device != previous:
            emu.set_device(device)
        return previous

    # Emu devices need no context creation, so "maybe" is the same exchange.
    maybe_exchange_device = exchange_device

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        emu.set_stream(emu.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return emu.current_stream(device_idx).native_handle

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        major, minor = emu.get_device_capability(device)
        return major * 10 + minor


register_interface_for_device("emu", EmuInterface)
for _index in range(emu.device_count()):
    register_interface_for_device(f"emu:{_index}", EmuInterface)
# LITERALINCLUDE END: DEVICE_INTERFACE
