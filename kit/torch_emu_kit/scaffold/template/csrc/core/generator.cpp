#include "core/generator.h"

#include <mutex>
#include <vector>

#include "core/check.h"

namespace torch_tpldev {
namespace {

c10::DeviceIndex checked_index(c10::DeviceIndex device) {
  if (device < 0) {
    int current = 0;
    TPLDEV_CHECK(tpldevGetDevice(&current));
    return static_cast<c10::DeviceIndex>(current);
  }
  TORCH_CHECK(device < tpldevDeviceCount(), "invalid tpldev device index ", static_cast<int>(device), " (",
              tpldevDeviceCount(), " devices)");
  return device;
}

} // namespace

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(at::make_generator<at::CPUGeneratorImpl>(c10::default_rng_seed_val)) {}

// Python locks this generator's mutex, the kernels lock the host generator's:
// every access to the state goes through the latter.
template <class F>
auto GeneratorImpl::locked(F f) const {
  std::lock_guard<std::mutex> lock(host_.mutex());
  return f(*host_.unsafeGetGeneratorImpl());
}

// LITERALINCLUDE START: GENERATOR_IMPL
void GeneratorImpl::set_current_seed(uint64_t seed) {
  locked([&](c10::GeneratorImpl& g) { g.set_current_seed(seed); });
}
uint64_t GeneratorImpl::current_seed() const {
  return locked([](c10::GeneratorImpl& g) { return g.current_seed(); });
}
uint64_t GeneratorImpl::seed() {
  return locked([](c10::GeneratorImpl& g) { return g.seed(); });
}
void GeneratorImpl::set_offset(uint64_t offset) {
  locked([&](c10::GeneratorImpl& g) { g.set_offset(offset); });
}
uint64_t GeneratorImpl::get_offset() const {
  return locked([](c10::GeneratorImpl& g) { return g.get_offset(); });
}
void GeneratorImpl::set_state(const c10::TensorImpl& state) {
  locked([&](c10::GeneratorImpl& g) { g.set_state(state); });
}
c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  return locked([](c10::GeneratorImpl& g) { return g.get_state(); });
}
GeneratorImpl* GeneratorImpl::clone_impl() const {
  auto* copy = new GeneratorImpl(device().index());
  copy->host_ = locked([this](c10::GeneratorImpl&) { return host_.clone(); });
  return copy;
}
// LITERALINCLUDE END: GENERATOR_IMPL

const at::Generator& default_generator(c10::DeviceIndex device) {
  // Built once, never destroyed (random ops may run during exit).
  static const auto* generators = [] {
    auto* all = new std::vector<at::Generator>();
    for (int i = 0; i < tpldevDeviceCount(); ++i) {
      all->push_back(at::make_generator<GeneratorImpl>(static_cast<c10::DeviceIndex>(i)));
    }
    return all;
  }();
  return (*generators)[checked_index(device)];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<GeneratorImpl>(checked_index(device));
}

} // namespace torch_tpldev
