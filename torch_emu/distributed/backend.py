"""The ``emu_gloo`` c10d backend: collectives on emu tensors, carried by Gloo.

Emu device memory lives in host memory, so a host transport can read and write
it in place. For every collective the process group

1. checks the tensors (emu tensors; CPU tensors only where the process group
   was also configured for CPU, ``"cpu:gloo,emu:emu_gloo"``),
2. synchronises the current stream of every emu device involved, so that work
   queued earlier (asynchronous copies, for example) has finished writing,
3. takes zero-copy CPU views of the tensors with ``torch_emu._C._host_alias``
   (in strict memory mode, where the host may not touch device memory outside
   kernels, it stages through CPU copies instead),
4. runs the same collective of an inner ``ProcessGroupGloo`` on those views and
5. returns a work object; its ``wait()`` returns once Gloo has finished and,
   in strict mode, the results have been copied back to the device. Emu
   kernels run to completion before their launch returns, so work queued on
   any emu stream after ``wait()`` sees the result.

PyTorch 2.13 cannot subclass ``torch._C._distributed_c10d.Backend`` from
Python (it has no Python constructor); the supported route for a Python
backend is a subclass of ``torch.distributed.ProcessGroup``, which
``init_process_group`` then uses as the process group itself.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroupGloo, ReduceOp
from torch.futures import Future

from .. import _C
from . import BACKEND_NAME

__all__ = ["EmuGlooProcessGroup", "create_emu_gloo_process_group"]
_RUNLOOP_DRAIN_SECONDS = 0.1
_EMU = "emu"


# LITERALINCLUDE START: DIST_WORK
class _EmuWork(dist.Work):
    """Work of one emu_gloo call: the Gloo works it started plus a completion
    step (copies back from staging buffers in strict mode, the division of
    ``ReduceOp.AVG``), run exactly once, by ``wait()`` or by the future."""

    def __init__(self, inner: Sequence[dist.Work], outputs: list[torch.Tensor], finish: Optional[Callable[[], None]]):
        super().__init__()
        self._inner = list(inner)
        self._outputs = outputs
        self._finish = finish
        self._finished = False
        self._lock = threading.Lock()

    def _complete(self) -> None:
        with self._lock:
            if not self._finished:
                if self._finish is not None:
                    self._finish()
                self._finished = True

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        for work in self._inner:
            if timeout:
                work.wait(timeout)
            else:
                work.wait()
        self._complete()
        return True

    def is_completed(self) -> bool:
        if self._finished:
            return True
        if all(w.is_completed() for w in self._inner):
            self.wait()  # raises the transport's error, if any
            return True
        return False

    def is_success(self) -> bool:
        return self.is_completed() and all(w.is_success() for w in self._inner)

    def exception(self):
        for w in self._inner:
            if w.is_completed() and w.exception() is not None:
                return w.exception()
        return None

    def result(self) -> list[torch.Tensor]:
        self.wait()
        return self._outputs

    def synchronize(self) -> None:
        self.wait()

    def get_future(self) -> Future:
        """A future completed with the output tensors (the emu tensors, not
        their host views), as DDP's reducer and comm hooks expect."""
        if len(self._inner) == 1:
            try:
                inner = self._inner[0].get_future()
            except RuntimeError:  # Gloo works without futures (send, recv, reduce_scatter)
                inner = None
            if inner is not None:

                def done(fut: Future) -> list[torch.Tensor]:
                    fut.wait()  # re-raises the transport's error
                    self._complete()
                    return self._outputs

                return inner.then(done)
        fut: Future = Future()
        try:
            self.wait()
            fut.set_result(self._outputs)
        except Exception as e:  # noqa: BLE001  (delivered through the future)
            fut.set_exception(e)
        return fut
# LITERALINCLUDE END: DIST_WORK


class _Staging:
    """Host views of the tensors of one call, and what to do once Gloo is done."""

    def __init__(self, pg: "EmuGlooProcessGroup", op: str):
        self.pg = pg
        self.op = op
        self.copy_back: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.synced: set[int] = set()

    # LITERALINCLUDE START: DIST_HOST_VIEW
    def host(self, t: torch.Tensor, *, output: bool) -> torch.Tensor:
        """The CPU tensor Gloo reads (and, for an ``output``, writes) for the
        emu tensor ``t``."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"emu_gloo {self.op}: expected a tensor, got {type(t).__name__}")
        if t.device.type == "cpu":
            if not self.pg._serves_cpu():
                raise ValueError(
                    f"emu_gloo {self.op}: got a CPU tensor, but this process group was created with "
                    f"backend '{BACKEND_NAME}', which only takes emu tensors. Move the tensor to "
                    f"'emu:<local rank>' or initialise with backend='cpu:gloo,emu:{BACKEND_NAME}'."
                )
            return t
        if t.device.type != _EMU:
            raise ValueError(f"emu_gloo {self.op}: expected an emu tensor, got one on {t.device}")
        index = t.device.index
        if index not in self.synced:  # prior work on the current stream must have landed
            torch.accelerator.current_stream(index).synchronize()  # = torch.emu.current_stream, cheaper
            self.synced.add(index)
        if not self.pg._strict:
            return _C._host_alias(t)  # zero copy, keeps t's memory alive while Gloo uses it
        # Strict mode: the host may not touch device memory outside kernels,
        # so Gloo works on a CPU copy, and outputs are copied back on wait().
        staged = t.to("cpu")
        if output:
            self.copy_back.append((t, staged))
        return staged
    # LITERALINCLUDE END: DIST_HOST_VIEW

    def hosts(self, ts: Sequence[torch.Tensor], *, output: bool) -> list[torch.Tensor]:
        return [self.host(t, output=output) for t in ts]

    def finish(self, avg_over: list[torch.Tensor] | None = None, divisor: int = 1) -> Optional[Callable[[], None]]:
        copy_back = self.copy_back
        if not copy_back and not avg_over:
            return None

        def run() -> None:
            for dst, src in copy_back:
                dst.copy_(src)
            for t in avg_over or ():
                t.div_(divisor)

        return run


def _check_same(op: str, what: str, tensors: Sequence[torch.Tensor], like: torch.Tensor) -> None:
    for t in tensors:
        if t.dtype != like.dtype:
            raise ValueError(f"emu_gloo {op}: {what} have mixed dtypes ({t.dtype} vs {like.dtype})")


class EmuGlooProcessGroup(dist.ProcessGroup):
    """A process group for emu tensors whose transport is ``ProcessGroupGloo``."""

    # LITERALINCLUDE START: DIST_PG_INIT
    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        # Same store (already prefixed by c10d per group and device), rank,
        # size and timeout: Gloo does the rendezvous and the transport.
        self._gloo = ProcessGroupGloo(store, rank, size, timeout)
        self._store, self._timeout = store, timeout
        self._strict = bool(_C._strict_mode())
        self._cpu: Optional[bool] = None
        # LITERALINCLUDE START: DIST_DEVICE_BACKEND
        # c10d uses this object as the process group itself, so the per-device
        # backend table of the C++ ProcessGroup starts empty, and
        # init_process_group(device_id=emu:i) fails at its eager-init step,
        # pg._get_backend(device_id) ("No backend type associated with device
        # type emu"). The transport of emu tensors is the Gloo backend: it
        # becomes the backend of the emu device type. Collectives still come
        # here first (the Python overrides); the C++ side only asks the
        # backend for its options, sequence numbers and capabilities.
        self._register_backend(torch.device(_EMU), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)
        # LITERALINCLUDE END: DIST_DEVICE_BACKEND
    # LITERALINCLUDE END: DIST_PG_INIT

    # -- identity -----------------------------------------------------------

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    def _get_backend_name(self) -> str:
        return BACKEND_NAME

    # The C++ ProcessGroup keeps its name and description in its backends; a
    # Python process group has none, so it keeps them itself (c10d sets them
    # through these overrides; DeviceMesh and functional collectives read them).
    def setGroupName(self, name: str) -> None:
        self._name = name
        self._gloo.options.group_name = name

    def getGroupName(self) -> str:
        return getattr(self, "_name", "")

    def setGroupDesc(self, desc: str) -> None:
        self._desc = desc

    def getGroupDesc(self) -> str:
        return getattr(self, "_desc", "")

    @property
    def _device_types(self) -> list[torch.device]:
        if self._serves_cpu():
            return [torch.device("cpu"), torch.device(_EMU)]
        return [torch.device(_EMU)]

    def _serves_cpu(self) -> bool:
        """Whether CPU tensors are welcome: only if the process group was
        created from a ``"cpu:gloo,emu:emu_gloo"`` style configuration. c10d
        replaces its own process group (and the Gloo backend it made for
        "cpu") with a Python process group, so this one serves "cpu" too."""
        if self._cpu is None:
            from torch.distributed import distributed_c10d as c10d

            config = c10d._world.pg_backend_config.get(self)
            if config is None:  # not registered (yet)
                return False
            pairs = [p.split(":") for p in config.split(",") if ":" in p]
            self._cpu = any(dev.strip() == "cpu" for dev, _ in pairs)
        return self._cpu

    # -- helpers ------------------------------------------------------------

    def _reduce_op(self, op: str, reduce_op: Any, tensors: Sequence[torch.Tensor]):
        """Gloo's op for ``reduce_op``: AVG is run as SUM followed by a division
        on the device (floating point only)."""
        if reduce_op == ReduceOp.AVG:
            for t in tensors:
                if not (t.is_floating_point() or t.is_complex()):
                    raise ValueError(f"emu_gloo {op}: ReduceOp.AVG needs floating point tensors, got {t.dtype}")
            return ReduceOp.SUM, True
        return reduce_op, False

    def _work(self, inner, outputs, staging: _Staging, avg_over=None) -> _EmuWork:
        return _EmuWork(inner if isinstance(inner, list) else [inner], outputs,
                        staging.finish(avg_over, self.size()))

    # -- collectives --------------------------------------------------------

    # LITERALINCLUDE START: DIST_ALLREDUCE
    def _allreduce(self, op: str, options, gloo_fn, tensors, opts):
        """allreduce and allreduce_coalesced: ``gloo_fn`` reduces the host
        views of ``tensors``; ``options`` is the class of its options."""
        opts = opts or options()
        s = _Staging(self, op)
        host = s.hosts(tensors, output=True)
        gloo_op, avg = self._reduce_op(op, opts.reduceOp, tensors)
        gopts = options()
        gopts.reduceOp = gloo_op
        gopts.timeout = opts.timeout
        work = gloo_fn(host, gopts)
        return self._work(work, list(tensors), s, list(tensors) if avg else None)

    def allreduce(self, tensors, opts=None):
        return self._allreduce("allreduce", dist.AllreduceOptions, self._gloo.allreduce, tensors, opts)
    # LITERALINCLUDE END: DIST_ALLREDUCE

    def allreduce_coalesced(self, tensors, opts=None):
        return self._allreduce("allreduce_coalesced", dist.AllreduceCoalescedOptions,
                               self._gloo.allreduce_coalesced, tensors, opts)

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        s = _Staging(self, "broadcast")
        host = s.hosts(tensors, output=True)
        return self._work(self._gloo.broadcast(host, opts), list(tensors), s)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        s = _Staging(self, "reduce")
        host = s.hosts(tensors, output=True)
        gloo_op, avg = self._reduce_op("reduce", opts.reduceOp, tensors)
        gopts = dist.ReduceOptions()
        gopts.reduceOp = gloo_op
        gopts.rootRank = opts.rootRank
        gopts.rootTensor = opts.rootTensor
        gopts.timeout = opts.timeout
        work = self._gloo.reduce(host, gopts)
        avg_over = list(tensors) if avg and self.rank() == opts.rootRank else None
        return self._work(work, list(tensors), s, avg_over)

    def _gather_lists(self, op: str, gloo_fn, output_lists, inputs, opts):
        """allgather, allgather_coalesced and gather: ``gloo_fn`` fills the
        host views of ``output_lists`` (lists of tensors) from those of ``inputs``."""
        s = _Staging(self, op)
        host_in = s.hosts(inputs, output=False)
        host_out = [s.hosts(lst, output=True) for lst in output_lists]
        work = gloo_fn(host_out, host_in, opts)
        return self._work(work, [t for lst in output_lists for t in lst], s)

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._gather_lists("allgather", self._gloo.allgather, output_tensors, input_tensors,
                                  opts or dist.AllgatherOptions())

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self._gather_lists("allgather_coalesced", self._gloo.allgather_coalesced, output_lists,
                                  input_list, opts or dist.AllgatherOptions())

    def all_gather_single(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        s = _Staging(self, "all_gather_into_tensor")
        _check_same("all_gather_into_tensor", "input and output", [input], output)
        host_in = s.host(input, output=False)
        host_out = s.host(output, output=True)
        return self._work(self._gloo._allgather_base(host_out, host_in, opts), [output], s)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        s = _Staging(self, "all_gather_into_tensor_coalesced")
        works = [
            self._gloo._allgather_base(s.host(o, output=True), s.host(i, output=False), opts)
            for o, i in zip(outputs, inputs)
        ]
        return self._work(works, list(outputs), s)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def gather(self, output_tensors, input_tensors, opts=None):
        return self._gather_lists("gather", self._gloo.gather, output_tensors, input_tensors,
                                  opts or dist.GatherOptions())

    def _scatter_lists(self, op: str, gloo_fn, outputs, input_lists, opts, avg: bool = False):
        """scatter and reduce_scatter: ``gloo_fn`` fills the host views of
        ``outputs`` from those of ``input_lists`` (lists of tensors); ``avg``:
        divide the outputs by the group size on completion."""
        s = _Staging(self, op)
        host_out = s.hosts(outputs, output=True)
        host_in = [s.hosts(lst, output=False) for lst in input_lists]
        work = gloo_fn(host_out, host_in, opts)
        return self._work(work, list(outputs), s, list(outputs) if avg else None)

    def scatter(self, output_tensors, input_tensors, opts=None):
        return self._scatter_lists("scatter", self._gloo.scatter, output_tensors, input_tensors,
                                   opts or dist.ScatterOptions())

    def _rs_opts(self, op: str, opts, tensors):
        opts = opts or dist.ReduceScatterOptions()
        gloo_op, avg = self._reduce_op(op, opts.reduceOp, tensors)
        gopts = dist.ReduceScatterOptions()
        gopts.reduceOp = gloo_op
        gopts.timeout = opts.timeout
        return gopts, avg

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        gopts, avg = self._rs_opts("reduce_scatter", opts, output_tensors)
        return self._scatter_lists("reduce_scatter", self._gloo.reduce_scatter, output_tensors,
                                   input_tensors, gopts, avg)

    def reduce_scatter_single(self, output, input, opts=None):
        s = _Staging(self, "reduce_scatter_tensor")
        _check_same("reduce_scatter_tensor", "input and output", [input], output)
        gopts, avg = self._rs_opts("reduce_scatter_tensor", opts, [output])
        work = self._gloo._reduce_scatter_base(s.host(output, output=True), s.host(input, output=False), gopts)
        return self._work(work, [output], s, [output] if avg else None)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        s = _Staging(self, "reduce_scatter_tensor_coalesced")
        gopts, avg = self._rs_opts("reduce_scatter_tensor_coalesced", opts, outputs)
        works = [
            self._gloo._reduce_scatter_base(s.host(o, output=True), s.host(i, output=False), gopts)
            for o, i in zip(outputs, inputs)
        ]
        return self._work(works, list(outputs), s, list(outputs) if avg else None)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        s = _Staging(self, "all_to_all")
        host_in = s.hosts(input_tensors, output=False)
        host_out = s.hosts(output_tensors, output=True)
        return self._work(self._gloo.alltoall(host_out, host_in, opts), list(output_tensors), s)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        s = _Staging(self, "all_to_all_single")
        _check_same("all_to_all_single", "input and output", [input], output)
        host_in = s.host(input, output=False)
        host_out = s.host(output, output=True)
        work = self._gloo.alltoall_base(host_out, host_in, output_split_sizes, input_split_sizes, opts)
        return self._work(work, [output], s)

    alltoall_base = all_to_all_single

    def barrier(self, opts=None):
        gopts = dist.BarrierOptions()
        if opts is not None:
            gopts.timeout = opts.timeout
        return _EmuWork([self._gloo.barrier(gopts)], [], None)

    # -- point to point -----------------------------------------------------

    def send(self, tensors, dst, tag=0):
        s = _Staging(self, "send")
        return self._work(self._gloo.send(s.hosts(tensors, output=False), dst, tag), list(tensors), s)

    def recv(self, tensors, src, tag=0):
        s = _Staging(self, "recv")
        return self._work(self._gloo.recv(s.hosts(tensors, output=True), src, tag), list(tensors), s)

    def recv_anysource(self, tensors, tag=0):
        s = _Staging(self, "recv")
        work = self._gloo.recv_anysource(s.hosts(tensors, output=True), tag)
        return _RecvAnyWork([work], list(tensors), s.finish())

    # -- lifetime -------------------------------------------------------------

    def abort(self) -> None:
        self._gloo.abort()

    def shutdown(self) -> None:
        self._gloo.shutdown()
        # Gloo's run-loop threads release a finished collective's tensors just
        # after its future completes. Those tensors were created from Python,
        # so releasing them takes the GIL; if that races with interpreter
        # finalisation the thread is torn down inside a destructor and the
        # process aborts ("terminate called without an active exception").
        # destroy_process_group() calls this: give the run loops that moment.
        time.sleep(_RUNLOOP_DRAIN_SECONDS)


class _RecvAnyWork(_EmuWork):
    def source_rank(self) -> int:
        return self._inner[0].source_rank()

    def _source_rank(self) -> int:
        return self.source_rank()


# LITERALINCLUDE START: DIST_CREATOR
def create_emu_gloo_process_group(store: dist.Store, rank: int, size: int, timeout: timedelta) -> EmuGlooProcessGroup:
    """The creator c10d calls from ``init_process_group``/``new_group``."""
    return EmuGlooProcessGroup(store, rank, size, timeout)
# LITERALINCLUDE END: DIST_CREATOR
