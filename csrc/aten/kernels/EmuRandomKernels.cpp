// Native emu kernels: the random fills behind torch.randn/rand/randint,
// dropout and init. They draw from the CPU generator inside each emu
// generator (OnDevice swaps it in), so a seed gives the same numbers as CPU.
#include <ATen/ops/bernoulli_native.h>
#include <ATen/ops/normal_native.h>
#include <ATen/ops/random_native.h>
#include <ATen/ops/uniform_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using namespace at::native;
using kernel::OnDevice;
using kernel::OnHost;
using Gen = std::optional<at::Generator>;

} // namespace

void register_random_kernels(torch::Library& m) {
  m.impl("normal_", TORCH_FN(OnDevice<static_cast<at::Tensor& (*)(at::Tensor&, double, double, Gen)>(&normal_)>::call));
  m.impl("uniform_", TORCH_FN(OnDevice<&uniform_>::call));
  m.impl("bernoulli_.float", TORCH_FN(OnDevice<static_cast<at::Tensor& (*)(at::Tensor&, double, Gen)>(&bernoulli_)>::call));
  // CPU's kernel iterates over self together with a host copy of p.
  m.impl("bernoulli_.Tensor",
         TORCH_FN(OnHost<static_cast<at::Tensor& (*)(at::Tensor&, const at::Tensor&, Gen)>(&bernoulli_)>::call));
  m.impl("random_", TORCH_FN(OnDevice<static_cast<at::Tensor& (*)(at::Tensor&, Gen)>(&random_)>::call));
  m.impl("random_.to", TORCH_FN(OnDevice<static_cast<at::Tensor& (*)(at::Tensor&, int64_t, Gen)>(&random_)>::call));
  m.impl("random_.from", TORCH_FN(OnDevice<static_cast<at::Tensor& (*)(at::Tensor&, int64_t, std::optional<int64_t>, Gen)>(
                             &random_)>::call));
}

} // namespace torch_emu
