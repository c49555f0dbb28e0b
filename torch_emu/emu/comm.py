"""``torch.emu.comm``: the collectives of ``torch.cuda.comm`` between emu
devices (broadcast, scatter, gather, reduce). CUDA's run in C++ over NCCL or
peer copies; emu devices all live in host memory, so these are peer copies
(``Tensor.to``) and adds on the destination device, with CUDA's argument rules
and coalescing of small tensors into one buffer per copy."""

import warnings
from typing import Any, Optional, Sequence

import torch
from torch._utils import _flatten_dense_tensors, _reorder_tensors_as, _take_tensors, _unflatten_dense_tensors

__all__ = ["broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather"]


def _emu(index: Any) -> torch.device:
    from . import _get_device_index, _lazy_init

    _lazy_init()
    return torch.device("emu", _get_device_index(index))


def _check_on_emu(tensors: Sequence[torch.Tensor], what: str) -> None:
    for i, t in enumerate(tensors):
        if t.device.type != "emu":
            raise RuntimeError(f"Expected all {what} tensors to be emu tensors, but {what} tensor {i} is on {t.device}")


def _copy_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` itself on its own device, else a copy (as CUDA's broadcast)."""
    return tensor if tensor.device == device else tensor.to(device, non_blocking=True)


def broadcast(tensor: torch.Tensor, devices=None, *, out=None) -> tuple:
    """Copies ``tensor`` (CPU or emu) to each of ``devices``, or into each
    tensor of ``out``; exactly one of the two is given."""
    if (devices is None) == (out is None):
        raise RuntimeError(
            f"Exactly one of 'devices' and 'out' must be specified, but got devices={devices} and out={out}"
        )
    if devices is not None:
        return tuple(_copy_to(tensor, _emu(d)) for d in devices)
    _check_on_emu(out, "output")
    for i, o in enumerate(out):
        if o.shape != tensor.shape:
            raise RuntimeError(f"output tensor {i} has shape {tuple(o.shape)}, expected {tuple(tensor.shape)}")
        o.copy_(tensor, non_blocking=True)
    return tuple(out)


def broadcast_coalesced(tensors, devices, buffer_size: int = 10485760) -> list:
    """Broadcasts ``tensors`` (all on one device) to ``devices``; small ones
    travel together in buffers of up to ``buffer_size`` bytes. Returns one
    list of tensors per device."""
    tensors = list(tensors)
    if len({t.device for t in tensors}) > 1:
        raise RuntimeError("broadcast_coalesced expects all tensors on one device")
    targets = [_emu(d) for d in devices]
    outputs: list[list[torch.Tensor]] = [[] for _ in targets]
    for chunk in _take_tensors(tensors, buffer_size):
        if chunk[0].is_sparse:  # _take_tensors groups sparse tensors apart
            copies = [[_copy_to(t, d) for t in chunk] for d in targets]
        else:
            flat = _flatten_dense_tensors(chunk)
            copies = [
                chunk if d == chunk[0].device else list(_unflatten_dense_tensors(_copy_to(flat, d), chunk))
                for d in targets
            ]
        for out, part in zip(outputs, copies):
            out.extend(part)
    return [_reorder_tensors_as(out, tensors) for out in outputs]


def reduce_add(inputs, destination: Optional[int] = None) -> torch.Tensor:
    """Sums same-shaped emu tensors from several devices onto ``destination``
    (default: current device), which must hold one of them."""
    inputs = list(inputs)
    _check_on_emu(inputs, "input")
    target = _emu(destination)
    for i, t in enumerate(inputs):
        if t.shape != inputs[0].shape:
            raise ValueError(
                f"input {i} has invalid size: got {'x'.join(map(str, t.shape))}, "
                f"but expected {'x'.join(map(str, inputs[0].shape))}"
            )
    root = next((i for i, t in enumerate(inputs) if t.device == target), None)
    if root is None:
        raise RuntimeError("reduce_add expects destination to be on the same emu device as one of the tensors")
    if len(inputs) == 1:
        return inputs[0]
    result = inputs[root].clone()
    for i, t in enumerate(inputs):
        if i != root:
            result.add_(t.to(target, non_blocking=True))
    return result


def reduce_add_coalesced(inputs, destination: Optional[int] = None, buffer_size: int = 10485760) -> tuple:
    """Like :func:`reduce_add` for several tensors per device (``inputs[d]``
    are device d's tensors); small dense tensors are summed in buffers."""
    per_device = [list(ts) for ts in inputs]
    sums: list[torch.Tensor] = []
    reference: list[torch.Tensor] = []
    dense: list[list[torch.Tensor]] = [[] for _ in per_device]
    for group in zip(*per_device, strict=True):
        if all(t.is_sparse for t in group):
            sums.append(reduce_add(group, destination))
            reference.append(group[0])
        else:
            for kept, t in zip(dense, group):
                kept.append(t.to_dense() if t.is_sparse else t)
            reference.append(dense[0][-1])
    for chunks in zip(*(_take_tensors(ts, buffer_size) for ts in dense), strict=True):
        flat_sum = reduce_add([_flatten_dense_tensors(chunk) for chunk in chunks], destination)
        sums.extend(t.data for t in _unflatten_dense_tensors(flat_sum, chunks[0]))
    return tuple(_reorder_tensors_as(sums, reference))


def scatter(tensor: torch.Tensor, devices=None, chunk_sizes=None, dim: int = 0, streams=None, *, out=None) -> tuple:
    """Splits ``tensor`` along ``dim`` onto ``devices`` (equal chunks, or
    ``chunk_sizes``), or into the tensors of ``out``; each copy runs on the
    matching stream of ``streams`` if given."""
    if out is None:
        if devices is None:
            raise RuntimeError("Exactly one of 'devices' and 'out' must be specified")
        targets = [_emu(d) for d in devices]
        if chunk_sizes is None:
            chunks = tensor.chunk(len(targets), dim)
        else:
            if len(chunk_sizes) != len(targets) or sum(chunk_sizes) != tensor.size(dim):
                raise RuntimeError(
                    f"chunk_sizes {list(chunk_sizes)} must have one size per device ({len(targets)}) "
                    f"summing to tensor.size({dim}) = {tensor.size(dim)}"
                )
            chunks = tensor.split(list(chunk_sizes), dim)
    else:
        if devices is not None or chunk_sizes is not None:
            raise RuntimeError("'devices' and 'chunk_sizes' must not be specified when 'out' is specified")
        _check_on_emu(out, "output")
        targets = [o.device for o in out]
        chunks = tensor.split([o.size(dim) for o in out], dim)
    if streams is not None and len(streams) != len(targets):
        raise RuntimeError(f"expected one stream per device ({len(targets)}), got {len(streams)}")
    from .streams import stream as on_stream

    results = []
    for i, (chunk, target) in enumerate(zip(chunks, targets)):
        with on_stream(streams[i] if streams is not None else None):
            if out is None:
                results.append(chunk.to(target, non_blocking=True))
            else:
                results.append(out[i].copy_(chunk, non_blocking=True))
    return tuple(results)


def gather(tensors, dim: int = 0, destination=None, *, out=None) -> torch.Tensor:
    """Concatenates emu tensors from several devices along ``dim`` onto
    ``destination`` (an emu device or ``"cpu"``; default: current emu device),
    or into ``out``."""
    tensors = list(tensors)
    _check_on_emu(tensors, "input")
    if out is not None:
        if destination is not None:
            raise RuntimeError(f"'destination' must not be specified when 'out' is specified, got {destination}")
        target = out.device
    elif destination == -1:
        warnings.warn(
            'Using -1 to represent CPU tensor is deprecated. Please use a device object or string instead, e.g., "cpu".',
            FutureWarning,
            stacklevel=2,
        )
        target = torch.device("cpu")
    elif isinstance(destination, (str, torch.device)) and torch.device(destination).type == "cpu":
        target = torch.device("cpu")
    else:
        target = _emu(destination)
    moved = [t.to(target, non_blocking=target.type == "emu") for t in tensors]
    if out is None:
        return torch.cat(moved, dim)
    return torch.cat(moved, dim, out=out)
