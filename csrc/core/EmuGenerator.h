// The emu random number generator. It wraps a CPU generator (Mersenne
// Twister): the fallback runs PyTorch's CPU random kernels on device memory
// with that CPU generator, so a given seed yields exactly the numbers CPU
// yields, and get/set_rng_state use CPU's state format.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace torch_emu {

// LITERALINCLUDE START: GENERATOR_IMPL
class EmuGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit EmuGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  // Used by at::check_generator<EmuGeneratorImpl>.
  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator the kernels draw from; its mutex guards the state.
  const at::Generator& cpu_generator() const {
    return cpu_;
  }

 private:
  EmuGeneratorImpl* clone_impl() const override;
  mutable at::Generator cpu_; // const accessors still lock its mutex
};
// LITERALINCLUDE END: GENERATOR_IMPL

// The per-device default generator (what torch.manual_seed seeds).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// The CPU generator to hand a CPU kernel for an emu random op: the one behind
// `gen` if given, else behind the default generator of `device`.
at::Generator cpu_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

} // namespace torch_emu
