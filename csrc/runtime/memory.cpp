// Device memory, pinned host memory, pointer attributes and strict mode.
//
// Each device owns one mapping the size of its capacity: the "video memory".
// It is a shared mapping of an anonymous memory file (memfd), so that another
// process can map the same memory (ipc.cpp). Reserving it with MAP_NORESERVE
// costs address space only; pages become real host memory when first touched
// and are handed back (a hole punched in the file) when freed, so the
// process's footprint tracks what is live. Because device memory is one
// contiguous range per device, telling a device pointer from a host pointer is
// a range check.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "runtime/runtime_internal.h"

namespace emu {
namespace {

// Bookkeeping of one device's arena. Offsets are relative to the arena base.
struct Arena {
  std::mutex mu;
  bool mapped = false;
  int fd = -1;           // the memory file behind the mapping
  size_t allocated = 0;  // live and foreign bytes
  std::map<size_t, size_t> free_by_offset;           // offset -> size, for coalescing
  std::set<std::pair<size_t, size_t>> free_by_size;  // (size, offset), for best fit
  std::map<size_t, size_t> live;                     // offset -> size (emuMalloc)
  std::unordered_map<size_t, size_t> foreign;        // offset -> size (another process's memory)
};

// Published arena bases (nullptr until the first allocation on the device).
// Plain atomics so the SIGSEGV handler and emuPointerGetAttributes can read
// them without locks.
std::atomic<char*> g_arena_base[kMaxDevices];

// Global registries are intentionally leaked: stream workers and other
// threads may still use them while static destructors run at process exit.
Arena* arenas() {
  static Arena* const all = new Arena[kMaxDevices];
  return all;
}

struct PinnedRegistry {
  std::shared_mutex mu;
  std::map<uintptr_t, size_t> blocks;  // start -> size
};
PinnedRegistry& pinned() {
  static PinnedRegistry* const registry = new PinnedRegistry;
  return *registry;
}

// Strict mode: how many kernels / device copies are in flight, guarded by
// g_protect_mu together with the arenas' protection.
std::mutex g_protect_mu;
int g_device_work = 0;
struct sigaction g_previous_segv;

int arena_prot() {
  return (!g_config.strict || g_device_work > 0) ? (PROT_READ | PROT_WRITE) : PROT_NONE;
}

// Creates the device's mapping on first use. Called with arena.mu held.
emuError_t map_arena_locked(int device, Arena& arena) {
  if (arena.mapped) return emuSuccess;
  // The protection must match the strict-mode state at the moment the arena
  // becomes visible, so decide and publish under the same lock as the toggle.
  std::lock_guard<std::mutex> protect(g_protect_mu);
  emu::note_device_state_created();
  // LITERALINCLUDE START: ARENA_MAP
  // A memory file rather than private anonymous memory: another process can
  // map it (emuIpcOpenMemHandle). It is sparse, so its size costs nothing.
  const int fd = memfd_create("torch-emu-device-memory", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(g_config.capacity)) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return set_error(emuErrorMemoryAllocation, "emuMalloc: could not create the memory of emu:%d (%s)",
                     device, std::strerror(err));
  }
  void* base = mmap(nullptr, g_config.capacity, arena_prot(), MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return set_error(emuErrorMemoryAllocation,
                     "emuMalloc: could not reserve %s of address space for emu:%d (%s)",
                     format_bytes(g_config.capacity).text, device, std::strerror(err));
  }
  // A forked child gets no device memory (a real driver's would not be there
  // either) instead of silently sharing the parent's.
  madvise(base, g_config.capacity, MADV_DONTFORK);
  // LITERALINCLUDE END: ARENA_MAP
  arena.fd = fd;
  arena.free_by_offset.emplace(0, g_config.capacity);
  arena.free_by_size.emplace(g_config.capacity, 0);
  arena.mapped = true;
  g_arena_base[device].store(static_cast<char*>(base), std::memory_order_release);
  return emuSuccess;
}

void insert_free_block(Arena& arena, size_t offset, size_t size) {
  arena.free_by_offset.emplace(offset, size);
  arena.free_by_size.emplace(size, offset);
}

void erase_free_block(Arena& arena, std::map<size_t, size_t>::iterator it) {
  arena.free_by_size.erase({it->second, it->first});
  arena.free_by_offset.erase(it);
}

// LITERALINCLUDE START: ARENA_ALLOCATE
// Best fit: the smallest free block that is large enough, split if larger.
// Returns false when no single free block can hold `size` bytes.
bool take_best_fit(Arena& arena, size_t size, size_t* offset) {
  auto best = arena.free_by_size.lower_bound({size, 0});
  if (best == arena.free_by_size.end()) return false;
  const size_t block_size = best->first;
  *offset = best->second;
  erase_free_block(arena, arena.free_by_offset.find(*offset));
  if (block_size > size) insert_free_block(arena, *offset + size, block_size - size);
  return true;
}

// Returns a block to the free list, merging it with free neighbours so that
// large allocations stay possible after many small ones come and go.
void release_block(Arena& arena, size_t offset, size_t size) {
  auto next = arena.free_by_offset.lower_bound(offset);
  if (next != arena.free_by_offset.end() && offset + size == next->first) {
    size += next->second;
    erase_free_block(arena, next);
  }
  auto prev = arena.free_by_offset.lower_bound(offset);
  if (prev != arena.free_by_offset.begin()) {
    --prev;
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      erase_free_block(arena, prev);
    }
  }
  insert_free_block(arena, offset, size);
}
// LITERALINCLUDE END: ARENA_ALLOCATE

size_t largest_free_block(const Arena& arena) {
  return arena.free_by_size.empty() ? 0 : arena.free_by_size.rbegin()->first;
}

// ---- strict-mode SIGSEGV handler (async-signal-safe code only) ----

size_t append(char* buf, size_t pos, size_t cap, const char* text) {
  while (*text != '\0' && pos + 1 < cap) buf[pos++] = *text++;
  return pos;
}

size_t append_hex(char* buf, size_t pos, size_t cap, uintptr_t value) {
  char digits[2 * sizeof(uintptr_t)];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  pos = append(buf, pos, cap, "0x");
  while (n > 0 && pos + 1 < cap) buf[pos++] = digits[--n];
  return pos;
}

size_t append_decimal(char* buf, size_t pos, size_t cap, int value) {
  char digits[12];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0 && pos + 1 < cap) buf[pos++] = digits[--n];
  return pos;
}

void strict_segv_handler(int sig, siginfo_t* info, void* /*context*/) {
  const int device = device_of_pointer(info->si_addr);
  if (device < 0) {
    // Not ours: put the previous handler back and return, so the faulting
    // instruction runs again and crashes (or is handled) as it would have
    // without torch-emu. A signal sent with kill() will not fault again, so
    // re-raise that one explicitly.
    sigaction(SIGSEGV, &g_previous_segv, nullptr);
    if (info->si_code <= 0) raise(sig);
    return;
  }
  char msg[160];
  size_t len = append(msg, 0, sizeof(msg), "torch-emu strict mode: host access to device memory at ");
  len = append_hex(msg, len, sizeof(msg), reinterpret_cast<uintptr_t>(info->si_addr));
  len = append(msg, len, sizeof(msg), " (emu:");
  len = append_decimal(msg, len, sizeof(msg), device);
  len = append(msg, len, sizeof(msg), ") outside a kernel\n");
  ssize_t ignored = write(STDERR_FILENO, msg, len);
  (void)ignored;
  // Die now, by SIGSEGV, with the default action (core dump if enabled). The
  // signal is blocked inside this handler, so it is delivered on return.
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

} // namespace

int device_of_pointer(const void* p) {
  const char* c = static_cast<const char*>(p);
  for (int d = 0; d < kMaxDevices; ++d) {
    const char* base = g_arena_base[d].load(std::memory_order_acquire);
    if (base != nullptr && c >= base && c < base + g_config.capacity) return d;
  }
  return -1;
}

bool range_in_arena(int device, const void* p, size_t n) {
  const char* base = g_arena_base[device].load(std::memory_order_acquire);
  const char* c = static_cast<const char*>(p);
  return base != nullptr && c >= base && n <= g_config.capacity - static_cast<size_t>(c - base);
}

bool range_is_pinned(const void* p, size_t n) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  PinnedRegistry& registry = pinned();
  std::shared_lock<std::shared_mutex> lock(registry.mu);
  auto it = registry.blocks.upper_bound(addr);
  if (it == registry.blocks.begin()) return false;
  --it;
  return addr - it->first < it->second && n <= it->second - (addr - it->first);
}

// Strict mode is a debugging aid, not a guarantee: protection is process-wide,
// so while any kernel runs every arena is accessible, and a host access that
// overlaps some kernel (on any stream) goes unnoticed. Run with a single
// stream to make it exact.
void install_strict_handler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = strict_segv_handler;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous_segv);
}

// ---- sharing with other processes (used by ipc.cpp) ----

namespace {
size_t offset_in_arena(int device, const void* p) {
  return static_cast<size_t>(static_cast<const char*>(p) - g_arena_base[device].load(std::memory_order_acquire));
}
} // namespace

emuError_t arena_file(int device, int* fd) {
  Arena& arena = arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  if (emuError_t err = map_arena_locked(device, arena)) return err;
  *fd = arena.fd;
  return emuSuccess;
}

bool find_allocation(const void* p, int* device, void** start, size_t* offset, size_t* size) {
  const int d = device_of_pointer(p);
  if (d < 0) return false;
  Arena& arena = arenas()[d];
  const size_t at = offset_in_arena(d, p);
  std::lock_guard<std::mutex> lock(arena.mu);
  auto it = arena.live.upper_bound(at);
  if (it == arena.live.begin()) return false;
  --it;
  if (at - it->first >= it->second) return false;
  *device = d;
  *start = g_arena_base[d].load(std::memory_order_relaxed) + it->first;
  *offset = it->first;
  *size = it->second;
  return true;
}

// LITERALINCLUDE START: ARENA_MAP_FOREIGN
// The receiving side of IPC: another process's device memory (`size` bytes of
// its memory file `fd` at `file_offset`) mapped over a free range of our own
// arena, so it is device memory here too and strict mode covers it.
emuError_t arena_map_foreign(int device, int fd, size_t file_offset, size_t size, void** ptr) {
  Arena& arena = arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  if (emuError_t err = map_arena_locked(device, arena)) return err;
  size_t offset = 0;
  if (size > g_config.capacity - arena.allocated || !take_best_fit(arena, size, &offset)) {
    return set_error(emuErrorMemoryAllocation,
                     "emuIpcOpenMemHandle: no room for %s of shared memory on emu:%d "
                     "(%s free of %s capacity)",
                     format_bytes(size).text, device, format_bytes(g_config.capacity - arena.allocated).text,
                     format_bytes(g_config.capacity).text);
  }
  char* at = g_arena_base[device].load(std::memory_order_relaxed) + offset;
  std::lock_guard<std::mutex> protect(g_protect_mu);  // the protection must match strict mode's state
  const off_t at_file = static_cast<off_t>(file_offset);
  if (mmap(at, size, arena_prot(), MAP_SHARED | MAP_FIXED, fd, at_file) == MAP_FAILED) {
    const int err = errno;
    release_block(arena, offset, size);
    return set_error(emuErrorMemoryAllocation, "emuIpcOpenMemHandle: could not map %s on emu:%d (%s)",
                     format_bytes(size).text, device, std::strerror(err));
  }
  madvise(at, size, MADV_DONTFORK);
  arena.foreign.emplace(offset, size);
  arena.allocated += size;
  *ptr = at;
  return emuSuccess;
}

// Puts our own (empty) memory back under a foreign range and frees the range.
emuError_t arena_unmap_foreign(void* ptr) {
  const int device = device_of_pointer(ptr);
  if (device < 0) return emuErrorInvalidDevicePointer;
  Arena& arena = arenas()[device];
  const size_t offset = offset_in_arena(device, ptr);
  std::lock_guard<std::mutex> lock(arena.mu);
  auto it = arena.foreign.find(offset);
  if (it == arena.foreign.end()) return emuErrorInvalidDevicePointer;
  const size_t size = it->second;
  {
    std::lock_guard<std::mutex> protect(g_protect_mu);
    const off_t own = static_cast<off_t>(offset);
    if (mmap(ptr, size, arena_prot(), MAP_SHARED | MAP_FIXED, arena.fd, own) == MAP_FAILED) {
      return set_error(emuErrorInvalidValue, "emuIpcCloseMemHandle: could not unmap %p (%s)", ptr,
                       std::strerror(errno));
    }
    madvise(ptr, size, MADV_DONTFORK);
  }
  arena.foreign.erase(it);
  arena.allocated -= size;
  release_block(arena, offset, size);
  return emuSuccess;
}
// LITERALINCLUDE END: ARENA_MAP_FOREIGN

// LITERALINCLUDE START: STRICT_MODE_TOGGLE
// The first piece of device work to start opens every arena, the last to end
// closes them again; in between, host code may (unnoticed) touch them too.
void device_work_begin() {
  std::lock_guard<std::mutex> lock(g_protect_mu);
  if (g_device_work++ > 0) return;
  for (int d = 0; d < g_config.device_count; ++d) {
    if (char* base = g_arena_base[d].load(std::memory_order_acquire)) {
      mprotect(base, g_config.capacity, PROT_READ | PROT_WRITE);
    }
  }
}

void device_work_end() {
  std::lock_guard<std::mutex> lock(g_protect_mu);
  if (--g_device_work > 0) return;
  for (int d = 0; d < g_config.device_count; ++d) {
    if (char* base = g_arena_base[d].load(std::memory_order_acquire)) {
      mprotect(base, g_config.capacity, PROT_NONE);
    }
  }
}
// LITERALINCLUDE END: STRICT_MODE_TOGGLE

// LITERALINCLUDE START: CAPTURE_ROLLBACK
// Work recorded during a capture also runs once (emu_runtime_graphs.h); these
// two undo its writes. Only memory live at the start is put back: what the
// capture allocated holds whatever it held, as after a real capture.
void snapshot_device_memory(int device, MemorySnapshot* snapshot) {
  Arena& arena = arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  char* base = g_arena_base[device].load(std::memory_order_acquire);
  snapshot->ranges.assign(arena.live.begin(), arena.live.end());
  snapshot->bytes.resize(arena.allocated);
  DeviceWorkScope device_work;
  size_t at = 0;
  for (const auto& [offset, size] : snapshot->ranges) {
    std::memcpy(snapshot->bytes.data() + at, base + offset, size);
    at += size;
  }
}

void restore_device_memory(int device, const MemorySnapshot& snapshot) {
  Arena& arena = arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  char* base = g_arena_base[device].load(std::memory_order_acquire);
  DeviceWorkScope device_work;
  size_t at = 0;
  for (const auto& [offset, size] : snapshot.ranges) {
    const auto live = arena.live.find(offset);
    if (live != arena.live.end() && live->second == size) {
      std::memcpy(base + offset, snapshot.bytes.data() + at, size);
    }
    at += size;
  }
}
// LITERALINCLUDE END: CAPTURE_ROLLBACK

} // namespace emu

using emu::format_bytes;
using emu::set_error;

// The native runtime's memory calls (plugin.cpp makes them the API).
namespace emu::native {

emuError_t emuMalloc(void** ptr, size_t size) {
  EMU_API_ENTER();
  if (ptr == nullptr) return set_error(emuErrorInvalidValue, "emuMalloc: ptr is null");
  *ptr = nullptr;
  if (size == 0) return emuSuccess;

  const int device = emu::current_device();
  emu::Arena& arena = emu::arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  if (emuError_t err = emu::map_arena_locked(device, arena)) return err;

  if (emu::faults_armed()) {
    if (emuError_t err = emu::fault_on_malloc(device, size, arena.allocated)) return err;
  }
  const size_t capacity = emu::g_config.capacity;
  const size_t free_bytes = capacity - arena.allocated;
  size_t offset = 0;
  if (size > free_bytes || !emu::take_best_fit(arena, emu::round_up_to_page(size), &offset)) {
    const size_t largest = emu::largest_free_block(arena);
    return set_error(emuErrorMemoryAllocation,
                     "emuMalloc: out of memory on emu:%d: tried to allocate %s with %s free of %s "
                     "capacity%s%s",
                     device, format_bytes(size).text, format_bytes(free_bytes).text,
                     format_bytes(capacity).text,
                     size <= free_bytes ? "; the largest free block is " : "",
                     size <= free_bytes ? format_bytes(largest).text : "");
  }
  const size_t rounded = emu::round_up_to_page(size);
  arena.live.emplace(offset, rounded);
  arena.allocated += rounded;
  *ptr = emu::g_arena_base[device].load(std::memory_order_relaxed) + offset;
  return emuSuccess;
}

emuError_t emuFree(void* ptr) {
  EMU_API_ENTER_RELEASE();
  if (ptr == nullptr) return emuSuccess;
  const int device = emu::device_of_pointer(ptr);
  if (device < 0) {
    return set_error(emuErrorInvalidDevicePointer, "emuFree: %p is not emu device memory", ptr);
  }
  // Queued kernels may still use the memory (a kernel does not own what it
  // reads): like cudaFree, wait for the device before the pages go.
  emu::wait_for_device_outside_work(device);
  emu::Arena& arena = emu::arenas()[device];
  char* base = emu::g_arena_base[device].load(std::memory_order_acquire);
  const size_t offset = static_cast<size_t>(static_cast<char*>(ptr) - base);

  std::lock_guard<std::mutex> lock(arena.mu);
  auto it = arena.live.find(offset);
  if (it == arena.live.end()) {
    const bool foreign = arena.foreign.count(offset) != 0;
    return set_error(emuErrorInvalidDevicePointer,
                     "emuFree: %p is not the start of a live allocation on emu:%d%s", ptr, device,
                     foreign ? " (it is another process's memory: close it with emuIpcCloseMemHandle)" : "");
  }
  const size_t size = it->second;
  arena.live.erase(it);
  arena.allocated -= size;
  // Give the pages back to the OS: the next user of this range sees zeros and
  // the process does not keep the memory of freed blocks resident.
  fallocate(arena.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(size));
  emu::release_block(arena, offset, size);
  return emuSuccess;
}

emuError_t emuMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  EMU_API_ENTER();
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return set_error(emuErrorInvalidValue, "emuMemGetInfo: null output pointer");
  }
  if (emuError_t err = emu::check_device("emuMemGetInfo", device)) return err;
  emu::Arena& arena = emu::arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  *free_bytes = emu::g_config.capacity - arena.allocated;
  *total_bytes = emu::g_config.capacity;
  return emuSuccess;
}

emuError_t emuMallocHost(void** ptr, size_t size) {
  EMU_API_ENTER();
  if (ptr == nullptr) return set_error(emuErrorInvalidValue, "emuMallocHost: ptr is null");
  *ptr = nullptr;
  if (size == 0) return emuSuccess;
  if (size > SIZE_MAX - emu::kPageSize) {
    return set_error(emuErrorMemoryAllocation, "emuMallocHost: cannot allocate %zu bytes", size);
  }
  const size_t rounded = emu::round_up_to_page(size);
  emu::note_device_state_created();
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return set_error(emuErrorMemoryAllocation,
                     "emuMallocHost: could not allocate %s of pinned host memory (%s)",
                     format_bytes(size).text, std::strerror(errno));
  }
  emu::PinnedRegistry& registry = emu::pinned();
  {
    std::unique_lock<std::shared_mutex> lock(registry.mu);
    registry.blocks.emplace(reinterpret_cast<uintptr_t>(p), rounded);
  }
  *ptr = p;
  return emuSuccess;
}

emuError_t emuFreeHost(void* ptr) {
  EMU_API_ENTER_RELEASE();
  if (ptr == nullptr) return emuSuccess;
  emu::PinnedRegistry& registry = emu::pinned();
  size_t size = 0;
  {
    std::unique_lock<std::shared_mutex> lock(registry.mu);
    auto it = registry.blocks.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == registry.blocks.end()) {
      return set_error(emuErrorInvalidValue,
                       "emuFreeHost: %p is not the start of a pinned allocation from emuMallocHost",
                       ptr);
    }
    size = it->second;
    registry.blocks.erase(it);
  }
  munmap(ptr, size);
  return emuSuccess;
}

emuError_t emuPointerGetAttributes(emuPointerAttributes* attr, const void* ptr) {
  EMU_API_ENTER();
  if (attr == nullptr) return set_error(emuErrorInvalidValue, "emuPointerGetAttributes: attr is null");
  const int device = emu::device_of_pointer(ptr);
  if (device >= 0) {
    attr->type = emuMemoryTypeDevice;
    attr->device = device;
  } else {
    attr->type = (ptr != nullptr && emu::range_is_pinned(ptr, 1)) ? emuMemoryTypeHost
                                                                  : emuMemoryTypeUnregistered;
    attr->device = -1;
  }
  return emuSuccess;
}

} // namespace emu::native
