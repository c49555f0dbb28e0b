// The emu random number generator. It wraps a CPU generator (Mersenne
// Twister): the fallback runs PyTorch's CPU random kernels on device memory
// with that CPU generator, so a given seed yields exactly the numbers CPU
// yields, and get/set_rng_state use CPU's state format.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/Stream.h>

#include <mutex>
#include <optional>

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

  // A kernel that draws may be queued: it draws when it runs, in the order of
  // its stream. Launched on `stream`, it first waits for draws queued on
  // another stream, so that draws keep the program's order; and every host
  // access to the state (seeding, get_state, a draw on the host) first waits
  // for the queued ones, so that it sees them done, as after CUDA's launches.
  void draw_on(const c10::Stream& stream);
  void wait_for_draws() const;

 private:
  EmuGeneratorImpl* clone_impl() const override;
  mutable at::Generator cpu_; // const accessors still lock its mutex
  // The stream of the last kernel launched that draws, if launched in this
  // process (not before a fork: see EmuGenerator.cpp); draws_mutex_ held.
  std::optional<c10::Stream> drawing_stream_locked() const;
  // Waits for the work of `stream`, if any and if it still exists.
  static void wait_for(const std::optional<c10::Stream>& stream);

  mutable std::mutex draws_mutex_;
  std::optional<c10::Stream> drawing_on_; // where the last kernel that draws was launched
  uint64_t drawing_fork_ = 0;             // ...and in which process (fork count)
};
// LITERALINCLUDE END: GENERATOR_IMPL

// The per-device default generator (what torch.manual_seed seeds).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// The emu generator an emu random op draws from: `gen` if given, else the
// default generator of `device`.
EmuGeneratorImpl* emu_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

// The CPU generator to hand a CPU kernel for an emu random op: the one behind
// emu_generator_for(gen, device).
at::Generator cpu_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

} // namespace torch_emu
