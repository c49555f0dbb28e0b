"""Data-loading helpers for accelerators: a batch prefetcher.

``Prefetcher(loader, device)`` wraps any iterable of batches (usually a
``torch.utils.data.DataLoader`` with ``pin_memory=True``) and copies the next
batch to ``device`` on a side stream while the caller works on the current
one. It uses only the generic ``torch.Stream`` / ``torch.Event`` API, so it
works for emu, for any other accelerator, and for ``device="cpu"`` (where it
simply moves the batches, so one training loop serves both devices).

Nothing is registered globally; import it when needed::

    from torch_emu.data import Prefetcher

    for x, y in Prefetcher(loader, "emu"):
        loss = loss_fn(model(x), y)
"""

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Callable, Optional, Union

import torch

__all__ = ["Prefetcher", "to_device"]


def _map_tensors(data: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``data`` with ``fn`` applied to every tensor inside it (tensors,
    mappings, namedtuples, tuples and lists, nested); other values as they are."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, Mapping):
        items = {k: _map_tensors(v, fn) for k, v in data.items()}
        try:
            return type(data)(items)  # dict, OrderedDict, ...
        except TypeError:
            return items
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(_map_tensors(v, fn) for v in data))
    if isinstance(data, (tuple, list)):
        return type(data)(_map_tensors(v, fn) for v in data)
    return data


def to_device(data: Any, device: Union[str, torch.device], non_blocking: bool = True) -> Any:
    """Copies every tensor in ``data`` (nested tuples, lists, dicts) to
    ``device`` on the current stream; asynchronous for pinned tensors when
    ``non_blocking``."""
    device = torch.device(device)
    return _map_tensors(data, lambda t: t.to(device, non_blocking=non_blocking))


def _resolve(device: Optional[Union[str, int, torch.device]]) -> torch.device:
    if device is None:
        acc = torch.accelerator.current_accelerator()
        if acc is None:
            return torch.device("cpu")
        device = acc
    if isinstance(device, int):
        acc = torch.accelerator.current_accelerator()
        if acc is None:
            raise ValueError(f"device index {device} given but no accelerator is available")
        device = torch.device(acc.type, device)
    device = torch.device(device)
    if device.type != "cpu" and device.index is None:
        device = torch.device(device.type, torch.accelerator.current_device_index())
    return device


# LITERALINCLUDE START: PREFETCHER
class Prefetcher:
    """Iterates ``loader``, with the copy of batch ``i + 1`` to ``device``
    queued on a side stream before batch ``i`` is handed out.

    Each batch handed out is ready to use on the device's *current* stream at
    the time it is handed out: that stream first waits for the batch's copy
    (an event), and every tensor of the batch is marked as used on it
    (``record_stream``), so the device allocator does not give its memory
    back to the side stream before the consumer's work on it has run. Copies
    from pinned memory (``DataLoader(..., pin_memory=True)``) overlap with the
    consumer's work; copies from pageable memory are correct but synchronous.
    """

    def __init__(self, loader: Iterable, device: Optional[Union[str, int, torch.device]] = None,
                 stream: Optional[torch.Stream] = None):
        self.loader = loader
        self.device = _resolve(device)
        if stream is not None and stream.device != self.device:
            raise ValueError(f"the copy stream is on {stream.device}, but the batches go to {self.device}")
        self._stream = stream

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator:
        if self.device.type == "cpu":
            for batch in self.loader:
                yield to_device(batch, self.device, non_blocking=False)
            return
        side = self._stream if self._stream is not None else torch.Stream(device=self.device)
        batches = iter(self.loader)

        def queue_next():
            try:
                batch = next(batches)
            except StopIteration:
                return None
            # The side stream must not overwrite memory the consumer still
            # reads: new blocks come from its own pool, ordered by the
            # record_stream below; it waits for nothing else.
            with side:
                on_device = to_device(batch, self.device, non_blocking=True)
                copied = side.record_event()
            return on_device, copied

        pending = queue_next()
        while pending is not None:
            batch, copied = pending
            consumer = torch.accelerator.current_stream(self.device.index)
            consumer.wait_event(copied)
            _map_tensors(batch, lambda t: t.record_stream(consumer) if t.device == self.device else None)
            pending = queue_next()  # next copy overlaps with the work on `batch`
            yield batch
# LITERALINCLUDE END: PREFETCHER
