// Injected faults (emu_runtime_faults.h): the armed faults, and the hooks
// emuMalloc, the launches and the copies call while any is armed.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <mutex>
#include <vector>

#include "runtime/emu_runtime_faults.h"
#include "runtime/runtime_internal.h"

namespace emu {

std::atomic<int> g_armed_faults{0};

namespace {

struct Fault {
  int id;
  emuFaultSpec spec;        // its kernel_name pointer is not kept: see below
  std::string kernel_name;  // "": every launch
  uint64_t seen = 0;  // matching calls so far
  uint64_t hits = 0;  // of which failed
};

std::mutex g_mu;
std::vector<Fault> g_faults;  // under g_mu
int g_next_id = 1;
char g_lost_reason[160];      // written once, before g_device_lost is set
EMU_HOT_TLS thread_local const char* t_launch_name = nullptr;  // emuFaultSetLaunchName

// LITERALINCLUDE START: FAULT_FIRES
// A call of `kind` on `device` is made: whether the first armed fault it
// matches makes it fail (that fault is returned, else nullptr).
Fault* fire(emuFaultKind kind, int device, bool (*matches)(const Fault&, const void*), const void* call) {
  for (Fault& f : g_faults) {
    if (f.spec.kind != kind || (f.spec.device >= 0 && f.spec.device != device)) continue;
    if (matches != nullptr && !matches(f, call)) continue;
    const uint64_t n = f.seen++;
    if (n < f.spec.after || (f.spec.times != 0 && f.hits >= f.spec.times)) continue;
    ++f.hits;
    return &f;
  }
  return nullptr;
}
// LITERALINCLUDE END: FAULT_FIRES

struct MallocCall {
  size_t size;
  size_t allocated;
};

bool named_launch(const Fault& f, const void* name) {
  return f.kernel_name.empty() ||
         (name != nullptr && std::strstr(static_cast<const char*>(name), f.kernel_name.c_str()) != nullptr);
}

bool over_limit(const Fault& f, const void* call) {
  const auto* c = static_cast<const MallocCall*>(call);
  return f.spec.reserved_limit == 0 || c->allocated + c->size > f.spec.reserved_limit;
}

} // namespace

emuError_t fault_on_malloc(int device, size_t size, size_t allocated) {
  std::lock_guard<std::mutex> lock(g_mu);
  const MallocCall call{size, allocated};
  const Fault* f = fire(emuFaultOutOfMemory, device, &over_limit, &call);
  if (f == nullptr) return emuSuccess;
  if (f->spec.reserved_limit != 0) {
    return set_error(emuErrorMemoryAllocation,
                     "emuMalloc: out of memory on emu:%d: tried to allocate %s with %s of an injected limit of %s "
                     "taken (fault %d)",
                     device, format_bytes(size).text, format_bytes(allocated).text,
                     format_bytes(f->spec.reserved_limit).text, f->id);
  }
  return set_error(emuErrorMemoryAllocation,
                   "emuMalloc: out of memory on emu:%d: tried to allocate %s (injected fault %d, device "
                   "allocation %llu)",
                   device, format_bytes(size).text, f->id, static_cast<unsigned long long>(f->seen));
}

emuError_t fault_on_launch(const char* call, int device, InjectedFailure* failure) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (const Fault* lost = fire(emuFaultDeviceLost, device, nullptr, nullptr)) {
    std::snprintf(g_lost_reason, sizeof(g_lost_reason), "injected fault %d, at kernel launch %llu on emu:%d",
                  lost->id, static_cast<unsigned long long>(lost->seen), device);
    g_device_lost.store(true, std::memory_order_release);
    return set_error(emuErrorDeviceLost, "%s: the emu device was lost (%s)", call, g_lost_reason);
  }
  if (const Fault* f = fire(emuFaultKernel, device, &named_launch, t_launch_name)) {
    *failure = {f->id, f->seen};
  }
  return emuSuccess;
}

std::string injected_failure_message(const InjectedFailure& failure, int device) {
  return "injected fault " + std::to_string(failure.fault_id) + ": kernel launch " + std::to_string(failure.launch) +
         " on emu:" + std::to_string(device) + " failed";
}

emuError_t fault_on_copy(const char* call, int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  const Fault* f = fire(emuFaultCopy, device, nullptr, nullptr);
  if (f == nullptr) return emuSuccess;
  return set_error(emuErrorEccUncorrectable,
                   "%s: uncorrectable memory error on emu:%d; nothing was copied (injected fault %d, copy %llu)",
                   call, device, f->id, static_cast<unsigned long long>(f->seen));
}

const char* device_lost_reason() {
  return g_lost_reason;
}

const char* launch_name() {
  return t_launch_name;
}

} // namespace emu

using emu::set_error;

extern "C" {

emuError_t emuFaultInject(const emuFaultSpec* spec, int* id) {
  EMU_API_ENTER();
  if (spec == nullptr || id == nullptr) return set_error(emuErrorInvalidValue, "emuFaultInject: spec or id is null");
  if (spec->kind < emuFaultOutOfMemory || spec->kind > emuFaultDeviceLost) {
    return set_error(emuErrorInvalidValue, "emuFaultInject: unknown fault kind %d", static_cast<int>(spec->kind));
  }
  if (spec->device != -1) {
    if (emuError_t err = emu::check_device("emuFaultInject", spec->device)) return err;
  }
  std::lock_guard<std::mutex> lock(emu::g_mu);
  *id = emu::g_next_id++;
  emu::Fault& f = emu::g_faults.emplace_back(emu::Fault{*id, *spec, spec->kernel_name ? spec->kernel_name : ""});
  f.spec.kernel_name = nullptr;
  emu::g_armed_faults.store(static_cast<int>(emu::g_faults.size()), std::memory_order_relaxed);
  return emuSuccess;
}

emuError_t emuFaultRemove(int id) {
  EMU_API_ENTER_RELEASE();
  std::lock_guard<std::mutex> lock(emu::g_mu);
  const size_t before = emu::g_faults.size();
  emu::g_faults.erase(std::remove_if(emu::g_faults.begin(), emu::g_faults.end(),
                                     [id](const emu::Fault& f) { return id == -1 || f.id == id; }),
                      emu::g_faults.end());
  if (id != -1 && emu::g_faults.size() == before) {
    return set_error(emuErrorInvalidValue, "emuFaultRemove: no armed fault %d", id);
  }
  emu::g_armed_faults.store(static_cast<int>(emu::g_faults.size()), std::memory_order_relaxed);
  return emuSuccess;
}

int emuFaultsArmed(void) {
  return emu::faults_armed() ? 1 : 0;
}

emuError_t emuFaultSetLaunchName(const char* name) {
  emu::t_launch_name = name;
  return emuSuccess;
}

emuError_t emuFaultGetHits(int id, uint64_t* hits) {
  EMU_API_ENTER_RELEASE();
  if (hits == nullptr) return set_error(emuErrorInvalidValue, "emuFaultGetHits: hits is null");
  std::lock_guard<std::mutex> lock(emu::g_mu);
  for (const emu::Fault& f : emu::g_faults) {
    if (f.id == id) {
      *hits = f.hits;
      return emuSuccess;
    }
  }
  return set_error(emuErrorInvalidValue, "emuFaultGetHits: no armed fault %d", id);
}

} // extern "C"
