"""Graphs of ``torch.emu``, with the API of ``torch.cuda``'s: ``EmuGraph``
(``CUDAGraph``), the ``graph`` context manager, ``graph_pool_handle``,
``make_graphed_callables`` and ``is_current_stream_capturing``.

The capture and replay themselves are emu's ``at::GraphImplInterface``
(csrc/core/EmuGraph.cpp), the implementation ``torch.accelerator.Graph``
also uses; this module only adds torch.cuda's names and signatures.
"""

import gc
from typing import Any, Callable, Optional

import torch
import torch.utils._pytree as pytree

from .. import _C

__all__ = [
    "EmuGraph",
    "Graph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
]

_CAPTURE_ERROR_MODES = ("default", "global", "thread_local", "relaxed")


def is_current_stream_capturing() -> bool:
    """Whether the current emu stream of the current device is capturing a graph."""
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> tuple[int, int]:
    """A new memory pool id: pass it as ``pool`` to several captures so that
    their graphs share one private pool (replay them in capture order)."""
    return _C._graph_pool_handle()


# LITERALINCLUDE START: PY_EMU_GRAPH
class EmuGraph(torch._C._acceleratorGraph):
    """An emu graph with ``torch.cuda.CUDAGraph``'s methods. Capture with
    :class:`graph` or :func:`make_graphed_callables` rather than calling
    ``capture_begin``/``capture_end`` yourself."""

    def __new__(cls, keep_graph: bool = False):
        return super().__new__(cls, keep_graph)

    def capture_begin(self, pool: Optional[tuple[int, int]] = None, capture_error_mode: str = "global") -> None:
        """Begins capturing the work of the current (side) stream."""
        if capture_error_mode not in _CAPTURE_ERROR_MODES:
            raise ValueError(f"capture_error_mode must be one of {_CAPTURE_ERROR_MODES}, got {capture_error_mode!r}")
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self) -> None:
        super().capture_end()

    def instantiate(self) -> None:
        super().instantiate()

    def replay(self) -> None:
        """Runs the captured work again, on the current stream, on the memory
        it used when captured."""
        super().replay()

    def reset(self) -> None:
        """Drops the captured graph and its hold on the memory pool."""
        super().reset()

    def pool(self) -> tuple[int, int]:
        return super().pool()

    def enable_debug_mode(self) -> None:
        super().enable_debug_mode()

    def debug_dump(self, debug_path: str) -> None:
        """Writes the graph's nodes, one per line (needs enable_debug_mode())."""
        super().debug_dump(debug_path)
# LITERALINCLUDE END: PY_EMU_GRAPH


Graph = EmuGraph


# LITERALINCLUDE START: PY_GRAPH_CONTEXT
class graph:
    """Captures the work of its body into ``emu_graph``, like ``torch.cuda.graph``:
    synchronises, empties the cache, makes ``stream`` (by default one side
    stream shared by all captures) current and captures on it. Entered while
    the current device, or the stream's, captures already, it raises
    ``torch.AcceleratorError`` and leaves that capture untouched."""

    default_capture_stream: Optional[torch.Stream] = None

    def __init__(
        self,
        emu_graph: EmuGraph,
        pool: Optional[tuple[int, int]] = None,
        stream: Optional[torch.Stream] = None,
        capture_error_mode: str = "global",
        enable_annotations: bool = False,
        check_input_liveness: bool = False,
    ):
        # torch.cuda.graph's two debugging aids have nothing to work on here:
        # annotations label kernels in CUDA's driver (emu's kernels are named
        # in the profiler instead), and an emu graph holds the memory of its
        # inputs until reset(), so no input can be freed before a replay.
        if enable_annotations:
            raise RuntimeError(
                "torch.emu.graph(enable_annotations=True): kernel annotations are recorded by CUDA's driver "
                "(cuda.bindings); emu has none. Use torch.profiler, which names every emu kernel."
            )
        if check_input_liveness:
            raise RuntimeError(
                "torch.emu.graph(check_input_liveness=True): an emu graph keeps its inputs' memory alive until "
                "reset(), so replay cannot read freed memory and there is nothing to check."
            )
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = torch.emu.Stream()
            stream = graph.default_capture_stream
        self.emu_graph = emu_graph
        self.pool = pool
        self.capture_stream = stream
        self.capture_error_mode = capture_error_mode
        self.stream_ctx = torch.emu.stream(stream)

    def __enter__(self) -> None:
        # A graph nested in another's capture fails here, before synchronize()
        # would invalidate the capture in progress.
        for device in {torch.emu.current_device(), self.capture_stream.device_index}:
            _C._check_no_capture(device)
        torch.emu.synchronize()
        if torch.compiler.config.force_cudagraph_gc:  # as torch.cuda.graph
            gc.collect()
        torch.emu.empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.emu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type: Any, *exc_info: object) -> None:
        try:
            self.emu_graph.capture_end()
        except RuntimeError:
            # The capture failed because the body raised: that error says why.
            if exc_type is None:
                raise
        finally:
            self.stream_ctx.__exit__(exc_type, *exc_info)
# LITERALINCLUDE END: PY_GRAPH_CONTEXT


# LITERALINCLUDE START: PY_MAKE_GRAPHED
def make_graphed_callables(
    callables: Any,
    sample_args: tuple,
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: Optional[tuple[int, int]] = None,
) -> Any:
    """``torch.cuda.make_graphed_callables`` for emu: each callable (module or
    function) and its backward are captured into two graphs, after
    ``num_warmup_iters`` eager warm-up runs on a side stream. Calling the
    result copies the inputs into the captured ones and replays the graphs;
    modules are returned with a graphed ``forward`` used while training."""
    if torch.is_autocast_enabled() and torch.is_autocast_cache_enabled():
        raise RuntimeError(
            "make_graphed_callables does not support the autocast caching. Please set `cache_enabled=False`."
        )
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    mempool = graph_pool_handle() if pool is None else pool
    entries = [_Entry(fn, args, allow_unused_input) for fn, args in zip(callables, sample_args)]

    torch.emu.synchronize()
    with torch.emu.stream(torch.emu.Stream()):
        for entry in entries:
            for _ in range(num_warmup_iters):
                entry.run_eagerly()
    torch.emu.synchronize()

    # Forward graphs in order, backward graphs in reverse order: the order a
    # training step replays them in, as graphs sharing a pool must be.
    for entry in entries:
        entry.capture_forward(mempool)
    for entry in reversed(entries):
        entry.capture_backward(mempool)

    results = tuple(entry.graphed() for entry in entries)
    return results[0] if single else results


class _Entry:
    """One callable of make_graphed_callables: its static tensors and graphs."""

    def __init__(self, fn: Callable, args: tuple, allow_unused_input: bool):
        if isinstance(fn, torch.nn.Module):
            if fn._backward_hooks or fn._forward_hooks or fn._forward_pre_hooks:
                raise RuntimeError(
                    "Modules must not have hooks registered at the time they are passed. However, registering "
                    "hooks on modules after passing them through make_graphed_callables is allowed."
                )
            if any(b.requires_grad for b in fn.buffers()):
                raise RuntimeError(
                    "In any :class:`~torch.nn.Module` passed to make_graphed_callables, only parameters may "
                    "be trainable. All buffers must have ``requires_grad=False``."
                )
        flat_args, self.args_spec = pytree.tree_flatten(args)
        if not all(isinstance(a, torch.Tensor) for a in flat_args):
            raise TypeError("In the beta API, sample_args for each callable must contain only Tensors.")
        if any(a.device.type != "emu" for a in flat_args):
            raise ValueError("make_graphed_callables on emu needs emu tensors as sample_args")
        self.fn = fn
        self.allow_unused_input = allow_unused_input
        self.static_inputs = tuple(flat_args)
        params = tuple(fn.parameters()) if isinstance(fn, torch.nn.Module) else ()
        # Everything the backward produces gradients for: inputs, then parameters.
        self.surface = self.static_inputs + params
        self.fwd_graph = EmuGraph()
        self.bwd_graph = EmuGraph()

    def _forward(self) -> tuple:
        outputs = self.fn(*pytree.tree_unflatten(list(self.static_inputs), self.args_spec))
        flat, self.outputs_spec = pytree.tree_flatten(outputs)
        return tuple(flat)

    def _grad_targets(self) -> tuple:
        return tuple(t for t in self.surface if t.requires_grad)

    def _backward(self, outputs: tuple, grad_outputs: tuple) -> tuple:
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
        if not pairs or not self._grad_targets():
            return tuple(None for _ in self._grad_targets())
        return torch.autograd.grad(
            tuple(o for o, _ in pairs),
            self._grad_targets(),
            grad_outputs=tuple(g for _, g in pairs),
            only_inputs=True,
            allow_unused=self.allow_unused_input,
        )

    def run_eagerly(self) -> None:
        outputs = self._forward()
        self._backward(outputs, tuple(torch.empty_like(o) if o.requires_grad else None for o in outputs))

    def capture_forward(self, mempool: tuple[int, int]) -> None:
        with graph(self.fwd_graph, pool=mempool):
            self.static_outputs = self._forward()

    def capture_backward(self, mempool: tuple[int, int]) -> None:
        self.static_grad_outputs = tuple(torch.empty_like(o) if o.requires_grad else None for o in self.static_outputs)
        with graph(self.bwd_graph, pool=mempool):
            grads = self._backward(self.static_outputs, self.static_grad_outputs)
        # The graphs keep what they use alive; the autograd graph of the
        # capture (and the gradient accumulators it holds, made on the capture
        # stream) can go.
        self.static_outputs = tuple(o.detach() for o in self.static_outputs)
        # One gradient (or None) per element of the surface.
        grads = iter(grads)
        self.static_grad_surface = tuple(next(grads) if t.requires_grad else None for t in self.surface)

    def graphed(self) -> Callable:
        entry = self

        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *inputs: torch.Tensor) -> tuple:
                for static, given in zip(entry.static_inputs, inputs):
                    if static.data_ptr() != given.data_ptr():
                        static.copy_(given)
                entry.fwd_graph.replay()
                return tuple(o.detach() for o in entry.static_outputs)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
                for static, given in zip(entry.static_grad_outputs, grads):
                    if static is not None and given is not None and static.data_ptr() != given.data_ptr():
                        static.copy_(given)
                entry.bwd_graph.replay()
                # Gradients of the inputs only; the parameters' are
                # accumulated by autograd through the parameters passed below.
                return tuple(g.detach() if g is not None else None for g in entry.static_grad_surface)

        def functionalized(*user_args: Any) -> Any:
            flat, _ = pytree.tree_flatten(user_args)
            params = entry.surface[len(entry.static_inputs):]
            outputs = Graphed.apply(*(tuple(flat) + params))
            return pytree.tree_unflatten(list(outputs), entry.outputs_spec)

        if isinstance(self.fn, torch.nn.Module):
            module, eager_forward = self.fn, self.fn.forward

            def forward(*user_args: Any) -> Any:
                if module.training == training_at_capture:
                    return functionalized(*user_args)
                return eager_forward(*user_args)

            training_at_capture = module.training
            module.forward = forward
            return module
        return functionalized
# LITERALINCLUDE END: PY_MAKE_GRAPHED
