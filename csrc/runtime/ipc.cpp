// IPC handles for device memory: what cudaIpcGetMemHandle/OpenMemHandle do.
//
// Device memory is a shared mapping of one memory file per device
// (memory.cpp). A handle names a range of that file: the sender's pid
// and file descriptor, the file's identity, and the range. The receiver opens
// the file through /proc/<pid>/fd/<fd> (the kernel checks it may: same user),
// checks it is still the same file, and maps the range into its own arena.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "runtime/emu_runtime_ipc.h"
#include "runtime/runtime_internal.h"

namespace emu {
namespace {

// LITERALINCLUDE START: IPC_HANDLE
// What the 64 bytes of an emuIpcMemHandle_t hold.
struct HandleData {
  uint32_t magic;       // kMagic: not some other 64 bytes
  int32_t pid;          // the sender
  int32_t fd;           // its device memory file, a descriptor of the sender
  int32_t device;
  uint64_t file_dev;    // the file's identity, so that a reused pid or
  uint64_t file_ino;    // descriptor is detected
  uint64_t offset;      // the allocation in the file
  uint64_t size;
};
static_assert(sizeof(HandleData) <= sizeof(emuIpcMemHandle_t), "handle too small");
constexpr uint32_t kMagic = 0x49554d45;  // "EMUI"
// LITERALINCLUDE END: IPC_HANDLE

// Memory opened in this process, by what it is (so a handle opened twice maps
// once) and by where it is mapped (for close).
using Key = std::tuple<uint64_t, uint64_t, uint64_t>;  // file dev, file ino, offset
struct Opened {
  void* ptr;
  int opens;
};
std::mutex g_opened_mu;
std::map<Key, Opened>& opened() {
  static auto* const all = new std::map<Key, Opened>;  // leaked, like the arenas
  return *all;
}

// Opens the sender's memory file and checks it is the one the handle names.
emuError_t open_sender_file(const HandleData& h, int* fd) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", h.pid, h.fd);
  *fd = open(path, O_RDWR | O_CLOEXEC);
  if (*fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return set_error(emuErrorInvalidValue,
                       "emuIpcOpenMemHandle: the process that shared this memory (pid %d) has exited; "
                       "the sender must stay alive until the receiver has opened the handle",
                       h.pid);
    }
    return set_error(emuErrorInvalidValue,
                     "emuIpcOpenMemHandle: cannot open the sender's device memory %s (%s); the "
                     "receiver must run as the same user on the same machine",
                     path, std::strerror(err));
  }
  struct stat st;
  if (fstat(*fd, &st) != 0 || static_cast<uint64_t>(st.st_dev) != h.file_dev ||
      static_cast<uint64_t>(st.st_ino) != h.file_ino ||
      static_cast<uint64_t>(st.st_size) < h.offset + h.size) {
    close(*fd);
    return set_error(emuErrorInvalidValue,
                     "emuIpcOpenMemHandle: stale handle: process %d no longer has that device memory "
                     "(it exited and the pid was reused?)",
                     h.pid);
  }
  return emuSuccess;
}

} // namespace
} // namespace emu

using emu::set_error;

extern "C" {

emuError_t emuMemGetAddressRange(void** base, size_t* size, const void* ptr) {
  EMU_API_ENTER();
  if (base == nullptr || size == nullptr) {
    return set_error(emuErrorInvalidValue, "emuMemGetAddressRange: null output pointer");
  }
  int device = -1;
  size_t offset = 0;
  if (!emu::find_allocation(ptr, &device, base, &offset, size)) {
    return set_error(emuErrorInvalidDevicePointer,
                     "emuMemGetAddressRange: %p is not inside an emuMalloc allocation", ptr);
  }
  return emuSuccess;
}

// LITERALINCLUDE START: IPC_GET_HANDLE
emuError_t emuIpcGetMemHandle(emuIpcMemHandle_t* handle, void* devptr) {
  EMU_API_ENTER();
  if (handle == nullptr) return set_error(emuErrorInvalidValue, "emuIpcGetMemHandle: handle is null");
  emu::HandleData h{};
  void* start = nullptr;
  size_t offset = 0;
  size_t size = 0;
  if (!emu::find_allocation(devptr, &h.device, &start, &offset, &size) || start != devptr) {
    return set_error(emuErrorInvalidDevicePointer,
                     "emuIpcGetMemHandle: %p is not the start of an emuMalloc allocation", devptr);
  }
  if (emuError_t err = emu::arena_file(h.device, &h.fd)) return err;
  struct stat st;
  if (fstat(h.fd, &st) != 0) {
    return set_error(emuErrorInvalidValue, "emuIpcGetMemHandle: fstat failed (%s)", std::strerror(errno));
  }
  h.magic = emu::kMagic;
  h.pid = static_cast<int32_t>(getpid());
  h.file_dev = static_cast<uint64_t>(st.st_dev);
  h.file_ino = static_cast<uint64_t>(st.st_ino);
  h.offset = offset;
  h.size = size;
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &h, sizeof(h));
  return emuSuccess;
}
// LITERALINCLUDE END: IPC_GET_HANDLE

// LITERALINCLUDE START: IPC_OPEN_HANDLE
emuError_t emuIpcOpenMemHandle(void** devptr, emuIpcMemHandle_t handle, unsigned int flags) {
  EMU_API_ENTER();
  if (devptr == nullptr) return set_error(emuErrorInvalidValue, "emuIpcOpenMemHandle: devptr is null");
  *devptr = nullptr;
  if ((flags & ~static_cast<unsigned int>(emuIpcMemLazyEnablePeerAccess)) != 0) {
    return set_error(emuErrorInvalidValue, "emuIpcOpenMemHandle: unknown flags 0x%x", flags);
  }
  emu::HandleData h;
  std::memcpy(&h, handle.reserved, sizeof(h));
  const bool page_aligned = h.size % emu::kPageSize == 0 && h.offset % emu::kPageSize == 0;
  if (h.magic != emu::kMagic || h.size == 0 || !page_aligned) {
    return set_error(emuErrorInvalidValue, "emuIpcOpenMemHandle: not a handle from emuIpcGetMemHandle");
  }
  if (h.pid == static_cast<int32_t>(getpid())) {
    return set_error(emuErrorInvalidValue,
                     "emuIpcOpenMemHandle: the handle was made by this process; use its memory directly");
  }
  if (h.device < 0 || h.device >= emu::g_config.device_count) {
    return set_error(emuErrorInvalidDevice,
                     "emuIpcOpenMemHandle: the memory is on emu:%d of process %d, but this process has "
                     "%d emu device(s) (TORCH_EMU_DEVICE_COUNT differs between the processes)",
                     h.device, h.pid, emu::g_config.device_count);
  }
  const emu::Key key{h.file_dev, h.file_ino, h.offset};
  std::lock_guard<std::mutex> lock(emu::g_opened_mu);
  auto it = emu::opened().find(key);
  if (it != emu::opened().end()) {
    it->second.opens += 1;
    *devptr = it->second.ptr;
    return emuSuccess;
  }
  int fd = -1;
  if (emuError_t err = emu::open_sender_file(h, &fd)) return err;
  void* ptr = nullptr;
  const emuError_t err = emu::arena_map_foreign(h.device, fd, h.offset, h.size, &ptr);
  close(fd);  // the mapping keeps the file alive
  if (err != emuSuccess) return err;
  emu::opened().emplace(key, emu::Opened{ptr, 1});
  *devptr = ptr;
  return emuSuccess;
}
// LITERALINCLUDE END: IPC_OPEN_HANDLE

emuError_t emuIpcCloseMemHandle(void* devptr) {
  EMU_API_ENTER_RELEASE();
  std::lock_guard<std::mutex> lock(emu::g_opened_mu);
  auto& all = emu::opened();
  for (auto it = all.begin(); it != all.end(); ++it) {
    if (it->second.ptr != devptr) continue;
    if (--it->second.opens > 0) return emuSuccess;
    all.erase(it);
    if (emuError_t err = emu::arena_unmap_foreign(devptr)) {
      return err == emuErrorInvalidDevicePointer
                 ? set_error(err, "emuIpcCloseMemHandle: %p is not mapped by emuIpcOpenMemHandle", devptr)
                 : err;
    }
    return emuSuccess;
  }
  return set_error(emuErrorInvalidDevicePointer,
                   "emuIpcCloseMemHandle: %p was not returned by emuIpcOpenMemHandle (or is already closed)",
                   devptr);
}

} // extern "C"
