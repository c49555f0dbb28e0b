// The tpldev random number generator. The random kernels that run for tpldev
// are PyTorch's CPU kernels (through the fallback), and those draw from a CPU
// generator: so each tpldev generator owns one, seeded and saved through it.
// Guide: torch-emu docs/guide/generator.md
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace torch_tpldev {

// LITERALINCLUDE START: GENERATOR_API
class GeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit GeneratorImpl(c10::DeviceIndex device);
  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1; // what at::check_generator<GeneratorImpl> compares
  }

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator the kernels draw from (they lock its mutex while drawing).
  const at::Generator& host() const {
    return host_;
  }

 private:
  GeneratorImpl* clone_impl() const override;
  template <class F>
  auto locked(F f) const;
  mutable at::Generator host_; // its mutex is locked by const accessors too
};

// One default generator per device (what torch.manual_seed seeds); -1 is the current device.
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// LITERALINCLUDE END: GENERATOR_API

} // namespace torch_tpldev
