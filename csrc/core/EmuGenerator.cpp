#include "core/EmuGenerator.h"

#include <c10/util/CallOnce.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <mutex>

#include "core/EmuStream.h"

#include <utility>

namespace torch_emu {

EmuGeneratorImpl::EmuGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

// Every accessor waits for the queued kernels that draw, then takes the CPU
// generator's lock, the same lock the CPU kernels take while drawing numbers.
void EmuGeneratorImpl::set_current_seed(uint64_t seed) {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_current_seed(seed);
}

uint64_t EmuGeneratorImpl::current_seed() const {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.current_seed();
}

uint64_t EmuGeneratorImpl::seed() {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.seed();
}

void EmuGeneratorImpl::set_offset(uint64_t offset) {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_offset(offset);
}

uint64_t EmuGeneratorImpl::get_offset() const {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.get_offset();
}

void EmuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> EmuGeneratorImpl::get_state() const {
  wait_for_draws();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}

EmuGeneratorImpl* EmuGeneratorImpl::clone_impl() const {
  wait_for_draws();
  auto* copy = new EmuGeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  copy->cpu_ = cpu_.clone();
  return copy;
}

namespace {
// A forked child has none of its parent's device work to wait for (its
// runtime refuses every call, as a driver's context does not survive fork),
// and seeding a generator there must work, as on CUDA: draws launched before
// a fork are forgotten after it.
std::atomic<uint64_t> g_forks{0};
const bool g_forks_counted = [] {
  pthread_atfork(nullptr, nullptr, [] { g_forks.fetch_add(1, std::memory_order_relaxed); });
  return true;
}();
} // namespace

// LITERALINCLUDE START: GENERATOR_DRAWS
void EmuGeneratorImpl::draw_on(const c10::Stream& stream) {
  std::optional<c10::Stream> before;
  {
    std::lock_guard<std::mutex> lock(draws_mutex_);
    before = drawing_stream_locked();
    drawing_on_ = stream;
    drawing_fork_ = g_forks.load(std::memory_order_relaxed);
  }
  if (before != stream) {
    wait_for(before);
  }
}

void EmuGeneratorImpl::wait_for_draws() const {
  std::optional<c10::Stream> drawing;
  {
    std::lock_guard<std::mutex> lock(draws_mutex_);
    drawing = drawing_stream_locked();
  }
  wait_for(drawing);
}

std::optional<c10::Stream> EmuGeneratorImpl::drawing_stream_locked() const {
  return drawing_fork_ == g_forks.load(std::memory_order_relaxed) ? drawing_on_ : std::nullopt;
}

// An external stream destroyed since has finished its work.
void EmuGeneratorImpl::wait_for(const std::optional<c10::Stream>& stream) {
  if (stream.has_value() && stream_exists(*stream) && !stream->query()) {
    stream->synchronize();
  }
}
// LITERALINCLUDE END: GENERATOR_DRAWS

// LITERALINCLUDE START: DEFAULT_GENERATORS
const at::Generator& default_generator(c10::DeviceIndex device) {
  static c10::once_flag once; // c10's: no thread-local writes once done, unlike std::call_once
  static std::vector<at::Generator>* generators = nullptr;
  c10::call_once(once, [] {
    // Leaked on purpose: generators must outlive every static destructor
    // that might still draw random numbers.
    generators = new std::vector<at::Generator>();
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      generators->push_back(at::make_generator<EmuGeneratorImpl>(i));
    }
  });
  if (device < 0) {
    device = current_device();
  }
  check_device_index(device);
  return (*generators)[device];
}
// LITERALINCLUDE END: DEFAULT_GENERATORS

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) {
    device = current_device();
  }
  check_device_index(device);
  return at::make_generator<EmuGeneratorImpl>(device);
}

// LITERALINCLUDE START: CPU_GENERATOR_FOR
EmuGeneratorImpl* emu_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  if (gen.has_value() && gen->defined()) {
    TORCH_CHECK(gen->device().type() == c10::DeviceType::PrivateUse1,
                "Expected a generator on emu for an emu random op, but got one on ", gen->device());
    return at::check_generator<EmuGeneratorImpl>(*gen);
  }
  return at::check_generator<EmuGeneratorImpl>(default_generator(device));
}

at::Generator cpu_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  return emu_generator_for(gen, device)->cpu_generator();
}
// LITERALINCLUDE END: CPU_GENERATOR_FOR

} // namespace torch_emu
