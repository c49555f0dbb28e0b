// Native emu kernels: index_select (embedding's forward), gather, scatter,
// scatter_add, masked_fill_ and cat.
#include <ATen/ops/cat_native.h>
#include <ATen/ops/gather_native.h>
#include <ATen/ops/index_select_native.h>
#include <ATen/ops/masked_fill_native.h>
#include <ATen/ops/scatter_add_native.h>
#include <ATen/ops/scatter_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using namespace at::native;
using kernel::OnDevice;
using kernel::Structured;

// cat's meta() also computes facts about the inputs that impl() takes as
// arguments (a "precomputed" structured op), so it gets its own wrapper.
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  const c10::DeviceIndex device = kernel::common_device(tensors);
  kernel::NewOutputs<structured_cat_out_cpu, 1> op(/*on_host=*/false);
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
          kernel::NewOutputs<structured_cat_out_cpu, 1> replay_op(/*on_host=*/false);
          replay_op.impl(inputs, op_facts.dim, op_facts.valid, op_facts.all_contiguous, op_facts.all_same_dtype,
                         op_facts.all_same_sizes_and_stride, op_facts.memory_format, out);
        };
      },
      "cat");
  return std::move(op.outputs[0]).take();
}

using MaskedFillScalar = at::Tensor& (*)(at::Tensor&, const at::Tensor&, const at::Scalar&);

} // namespace

void register_indexing_kernels(torch::Library& m) {
  m.impl("index_select", TORCH_FN(OnDevice<&index_select_cpu_>::call));
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
