"""Inductor's backend for the emu device: C++/OpenMP kernels (emu device
memory is host memory, so Inductor's CPU code generator already writes the
right kernels) called from a Python wrapper that runs each kernel as device
work on the current emu stream.

PyTorch looks the backend up as attributes of the device module
(``torch.emu.Scheduling``, ``torch.emu.PythonWrapperCodegen``,
``torch.emu.CppWrapperCodegen``, ``torch.emu.WrapperFxCodegen``) the first
time Inductor compiles anything; ``torch_emu.compile`` maps those attributes
to the classes here, importing this module on first access.
"""

from torch._inductor import config
from torch._inductor.codegen.common import DeviceOpOverrides, register_device_op_overrides
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen


# LITERALINCLUDE START: KERNEL_LAUNCH
class _LaunchKernelCalls:
    """Calls every generated kernel through ``torch_emu._C._launch``.

    A C++ kernel takes raw pointers into emu device memory, so it must run
    inside a launch: in the order of the current stream, with the device
    memory accessible (strict mode protects it outside device work). Extern
    kernels (aten.mm, convolutions...) are emu operators and launch
    themselves.

    Why one launch per kernel and not one around the whole wrapper call: a
    launch costs about half a microsecond, so batching saves little, and the
    wrapper is not device work. Inside a launch the CPU allocator hands out
    device memory (CPU tensors the graph creates would end up there and fault
    in strict mode), the wrapper's copies and synchronisations would run on
    the very stream they wait for, and the whole Python wrapper would hold the
    stream while it allocates and frees buffers.
    """

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        if triton or device is None or device.type != "emu":
            return super()._generate_kernel_call_helper(
                kernel_name, call_args, device=device, triton=triton, **kwargs
            )
        index = -1 if device.index is None else device.index
        # name=: the kernel's name in the profiler's device trace.
        self.writeline(f"_launch({', '.join([str(index), kernel_name, *call_args])}, name={kernel_name!r})")

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        if device.type != "emu" or config.test_configs.track_memory_lifecycle:
            return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        # For a device it does not know, PythonWrapperCodegen writes
        # torch.empty_strided(..., device='emu'): about 2 µs of argument
        # parsing and dispatch per buffer. emu's direct allocation
        # (_empty_strided, CompileBindings.cpp) is what empty_strided_cpu and
        # empty_strided_cuda are to those devices; the buffer goes on the
        # device the graph was compiled for (-1: the current one).
        shape_code = self.codegen_python_shape_tuple(shape)
        allocation_code = self.codegen_python_shape_tuple(shape if allocation_shape is None else allocation_shape)
        stride_code = self.codegen_python_shape_tuple(stride)
        index = -1 if device.index is None else device.index
        line = f"{name} = _empty_strided({allocation_code}, {stride_code}, {dtype}, {index})"
        if allocation_code != shape_code:
            line += f".as_strided({shape_code}, {stride_code})"
        return line

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline("from torch_emu._C import _empty_strided, _launch")
# LITERALINCLUDE END: KERNEL_LAUNCH


class _EmuSubgraphWrapperCodegen(_LaunchKernelCalls, SubgraphPythonWrapperCodegen):
    """Wrapper of a subgraph (torch.cond branches, while_loop bodies...)."""


# LITERALINCLUDE START: QUEUED_ENTRY
# The C types of a kernel's arguments that a 64-bit word carries as is: the
# buffers' pointers and the sizes Inductor passes.
_WORD_TYPES = ("int64_t", "int32_t", "long", "int", "bool")


def queued_entry(arg_types: list[str]) -> str:
    """C++ source of a second entry point to a generated kernel,
    ``emu_queued_kernel``: its arguments packed as 64-bit words, so that
    ``_launch`` can queue the call on a stream and the stream runs it without
    Python (the Python entry Inductor compiles needs the GIL, which the host
    thread holds while it runs the wrapper). Empty for a kernel with another
    argument type (a float scalar): it keeps the Python entry.
    """
    casts = []
    for i, arg_type in enumerate(arg_types):
        base = arg_type.replace("const ", "").strip()
        if base.endswith("*"):
            casts.append(f"reinterpret_cast<{arg_type}>(args[{i}])")
        elif base in _WORD_TYPES:
            casts.append(f"static_cast<{base}>(static_cast<int64_t>(args[{i}]))")
        else:
            return ""
    return f'\nextern "C" void emu_queued_kernel(const uint64_t* args) {{ kernel({", ".join(casts)}); }}\n'
# LITERALINCLUDE END: QUEUED_ENTRY


# LITERALINCLUDE START: INDUCTOR_BACKEND
class EmuScheduling(CppScheduling):
    """Inductor's C++ kernel generator, told that it generates for C++.

    While it writes a kernel, Inductor asks ``get_current_backend()``
    (torch/_inductor/utils.py) which language the current device's kernels
    are in, to pick dtype rules (Triton upcasts bfloat16 to float32, "masked"
    takes its dtype elsewhere...). It answers ``config.cuda_backend``,
    "triton", for every device type it does not know, emu included, and the
    C++ code generator then fails or miscompiles. Emu kernels are therefore
    generated with that answer set to "cpp".
    """

    def codegen_node(self, node):
        with config.patch(cuda_backend="cpp"):
            return super().codegen_node(node)

    def codegen_template(self, *args, **kwargs):
        with config.patch(cuda_backend="cpp"):
            return super().codegen_template(*args, **kwargs)

    def flush(self):
        with config.patch(cuda_backend="cpp"):
            return super().flush()

    def define_kernel(self, src_code, nodes, kernel_args=None):
        # Each kernel gets the queued entry point beside Inductor's Python one.
        args = self.kernel_group.args if kernel_args is None else kernel_args
        return super().define_kernel(src_code + queued_entry(args.cpp_argdefs()[2]), nodes, kernel_args)


class EmuWrapperCodegen(_LaunchKernelCalls, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return _EmuSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return EmuWrapperCodegen()


class EmuDeviceOpOverrides(DeviceOpOverrides):
    """The device calls the Python wrapper writes around kernels."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch._dynamo.device_interface import get_interface_for_device\n" \
               f"{name} = get_interface_for_device('emu').get_raw_stream"

    def set_device(self, device_idx: int) -> str:
        return f"torch.emu.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.emu.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.emu.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.emu.current_stream()"


class _UnsupportedWrapper:
    """The C++ wrapper (``cpp_wrapper=True``, AOTInductor) and the FX wrapper
    (``fx_wrapper=True``) would call kernels outside any launch. PyTorch only
    registers a PrivateUse1 backend that names all of its wrappers, so these
    exist and fail with a clear message."""

    supports_caching = False
    setting = ""

    @classmethod
    def create(cls, *args, **kwargs):
        raise NotImplementedError(
            f"torch.compile on emu runs its kernels from Inductor's Python wrapper only; "
            f"{cls.setting} is not supported on emu"
        )


class EmuCppWrapperCodegen(_UnsupportedWrapper):
    setting = "torch._inductor.config.cpp_wrapper=True (and AOTInductor)"


class EmuFxWrapperCodegen(_UnsupportedWrapper):
    setting = "torch._inductor.config.fx_wrapper=True"


register_device_op_overrides("emu", EmuDeviceOpOverrides())
# LITERALINCLUDE END: INDUCTOR_BACKEND

# LITERALINCLUDE START: SCHEDULER_CONFIG
# Inductor's scheduler tells C++ kernels from Triton ones by device type: it
# skips its Triton-only loop transformations for nodes whose device is "cpu"
# (BaseSchedulerNode.is_cpu in torch/_inductor/scheduler.py) and would apply
# them to emu nodes, whose kernels are C++ too, and fail. These switches only
# enable those transformations, so turning them off changes nothing for CPU;
# it does for Triton devices compiled in the same process, which have no
# per-device setting.
config.loop_ordering_after_fusion = False
config.loop_reindexing_after_fusion = False
config.loop_index_inversion_in_fusion = False
config.triton.mix_order_reduction = False
# LITERALINCLUDE END: SCHEDULER_CONFIG
