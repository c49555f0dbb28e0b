// Native emu kernels: index_select (embedding's forward), integer indexing
// (x[i]), gather, scatter, scatter_add, masked_fill_ and cat.
#include <ATen/ops/cat_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gather_native.h>
#include <ATen/ops/index_native.h>
#include <ATen/ops/index_select_native.h>
#include <ATen/ops/masked_fill_native.h>
#include <ATen/ops/scatter_add_native.h>
#include <ATen/ops/scatter_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"
#include "aten/kernels/EmuNativeKernels.h"

// gather reads of its input only the elements its index picks.
template <>
inline constexpr bool torch_emu::kernel::picks_rows<at::native::structured_gather_out> = true;

namespace torch_emu {
namespace {

using namespace at::native;
using kernel::OnDevice;
using kernel::Structured;

// cat's meta() also computes facts about the inputs that impl() takes as
// arguments (a "precomputed" structured op), so it gets its own wrapper.
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  const c10::DeviceIndex device = kernel::common_device(tensors);
  kernel::NewOutputs<structured_cat_out_cpu, 1> op;
  const auto facts = op.meta(tensors, dim);
  auto run = [&op, &facts](const at::ITensorListRef& inputs, const at::Tensor& out) {
    op.impl(inputs, facts.dim, facts.valid, facts.all_contiguous, facts.all_same_dtype,
            facts.all_same_sizes_and_stride, facts.memory_format, out);
  };
  kernel::queue_on(
      device, [&] { run(tensors, *op.outputs[0]); },
      [&]() -> std::function<void()> {
        // impl() only reads op's outputs through `out`: a replay can reuse the
        // facts and op of this call by value.
        return [op_facts = facts, inputs = kernel::keep(tensors), out = kernel::keep(*op.outputs[0])] {
          kernel::NewOutputs<structured_cat_out_cpu, 1> replay_op;
          replay_op.impl(inputs, op_facts.dim, op_facts.valid, op_facts.all_contiguous, op_facts.all_same_dtype,
                         op_facts.all_same_sizes_and_stride, op_facts.memory_format, out);
        };
      },
      "cat", 2 * op.nbytes()); // reads as much as it writes
  return std::move(op.outputs[0]).take();
}

// LITERALINCLUDE START: INDEX_SELECT
// index_select (embedding's forward) with its kernel queued: the host makes
// the checks of CPU's index_select_out_cpu_ that need no data and allocates
// the result; the kernel reads the indices, so an index out of range is an
// error of the kernel (reported at the next sync when queued, as on CUDA).
void index_select_kernel(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& result) {
  index_select_out_cpu_(self, dim, index, result);
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  kernel::common_device(self, index);
  dim = c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(self.dim() > 0 || index.numel() == 1, "index_select(): Index to scalar can have only 1 value, got ",
              index.numel(), " value(s)");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) {
    sizes[dim] = index.numel();
  }
  at::Tensor result = at::empty(sizes, self.options());
  // It reads as many rows as it writes.
  OnDevice<&index_select_kernel>::call_as("index_select", 2 * result.nbytes() + index.nbytes(), self, dim, index,
                                          result);
  return result;
}
// LITERALINCLUDE END: INDEX_SELECT

using kernel::KnownOutputs;
using kernel::NewOutputs;

// LITERALINCLUDE START: INTEGER_INDEX
// CPU's index kernel (meta() works out the result's shape from the indices'
// shapes alone, impl() reads them), queued: an index out of range is the
// kernel's error, reported at the next sync when queued, as on CUDA.
void index_into(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, const at::Tensor& out) {
  KnownOutputs<structured_index_out, 1> op({out});
  const auto facts = op.meta(self, at::IOptTensorListRef(indices));
  op.impl(self, facts.sizes, facts.strides, out);
}

} // namespace

bool indexes_with_integers(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  if (!native_kernels_registered() || !self.is_privateuseone() || self.layout() != at::kStrided ||
      self.is_quantized()) {
    return false;
  }
  for (const std::optional<at::Tensor>& index : indices) {
    if (!index.has_value() || !index->defined()) {
      continue;
    }
    const bool integer = index->scalar_type() == at::kLong || index->scalar_type() == at::kInt;
    // On another emu device: meta() refuses them with CUDA's RuntimeError.
    const bool host_or_emu = index->device().is_cpu() || index->is_privateuseone();
    if (!integer || !host_or_emu || index->layout() != at::kStrided) {
      return false;
    }
  }
  return true;
}

at::Tensor index_with_integers(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  // Host and int32 indices become int64 emu tensors first, as meta() would
  // (CUDA copies host indices to the device too): the kernel then reads only
  // device memory, and a queued one keeps what it reads.
  c10::List<std::optional<at::Tensor>> on_device;
  on_device.reserve(indices.size());
  for (const std::optional<at::Tensor>& index : indices) {
    const bool moves = index.has_value() && index->defined() && (index->is_cpu() || index->device() == self.device());
    on_device.push_back(moves ? std::optional<at::Tensor>(index->to(self.device(), at::kLong)) : index);
  }
  NewOutputs<structured_index_out, 1> op;
  const auto facts = op.meta(self, at::IOptTensorListRef(on_device));
  const at::Tensor& out = *op.outputs[0];
  size_t bytes = 2 * out.nbytes(); // reads as many elements of self as it writes
  for (const std::optional<at::Tensor>& index : on_device) {
    bytes += kernel::bytes_of(index);
  }
  kernel::queue_on(
      self.device().index(), [&] { op.impl(self, facts.sizes, facts.strides, out); },
      [&]() -> std::function<void()> {
        c10::List<std::optional<at::Tensor>> kept;
        for (const std::optional<at::Tensor>& index : on_device) {
          kept.push_back(kernel::keep(index));
        }
        return [self = kernel::keep(self), kept = std::move(kept), out = kernel::keep(out)] {
          index_into(self, kept, out);
        };
      },
      "index", bytes);
  return std::move(op.outputs[0]).take();
}
// LITERALINCLUDE END: INTEGER_INDEX

namespace {

using MaskedFillScalar = at::Tensor& (*)(at::Tensor&, const at::Tensor&, const at::Scalar&);

} // namespace

void register_indexing_kernels(torch::Library& m) {
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("gather", TORCH_FN(Structured<structured_gather_out>::functional));
  m.impl("scatter.src", TORCH_FN(Structured<structured_scatter_src_out>::functional));
  m.impl("scatter_.src", TORCH_FN(Structured<structured_scatter_src_out>::inplace));
  m.impl("scatter.value", TORCH_FN(Structured<structured_scatter_value_out>::functional));
  m.impl("scatter_.value", TORCH_FN(Structured<structured_scatter_value_out>::inplace));
  m.impl("scatter_add", TORCH_FN(Structured<structured_scatter_add>::functional));
  m.impl("scatter_add_", TORCH_FN(Structured<structured_scatter_add>::inplace));
  m.impl("masked_fill_.Scalar", TORCH_FN(OnDevice<static_cast<MaskedFillScalar>(&masked_fill__cpu)>::call));
  m.impl("cat", TORCH_FN(cat));
}

} // namespace torch_emu
