// torch_emu._C bindings of the allocator features torch.emu.memory exposes
// beyond torch.accelerator.memory: private pools, the memory fraction, raw
// allocations, the pluggable allocator, pinned-memory statistics, and the
// allocation history with its snapshot (CUDA's format, for _memory_viz).
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuStream.h"

namespace torch {
// Exported by libtorch_python; declared here because its header
// (profiler/python/combined_traceback.h) needs nlohmann/json, which the wheel
// does not ship. Turns tracebacks into lists of {name, filename, line}.
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
} // namespace torch

namespace torch_emu {
namespace {

using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

c10::MempoolId_t to_id(const std::pair<uint64_t, uint64_t>& id) {
  return {id.first, id.second};
}

py::dict stat_dict(const c10::CachingAllocator::Stat& stat) {
  py::dict d;
  d["current"] = stat.current;
  d["peak"] = stat.peak;
  d["allocated"] = stat.allocated;
  d["freed"] = stat.freed;
  return d;
}

py::dict duration_dict(const c10::CachingAllocator::DurationStat& stat) {
  py::dict d;
  d["total"] = stat.total;
  d["max"] = stat.max;
  d["min"] = stat.min;
  d["count"] = stat.count;
  d["avg"] = stat.count == 0 ? 0 : stat.total / stat.count;
  return d;
}

// LITERALINCLUDE START: GATHER_CONTEXT
// The context of an allocation: Python frames (and C++ frames with
// stacks="all"), gathered by PyTorch's CapturedTraceback, which takes the GIL
// for the Python ones (ops run with it released). Only on threads Python
// knows: a stream worker running a kernel has no Python frames, and must not
// wait for the GIL while its launching thread might hold it.
bool python_thread() {
  return PyGILState_GetThisThreadState() != nullptr;
}

std::shared_ptr<c10::GatheredContext> gather_python() {
  return torch::CapturedTraceback::gather(python_thread(), true, false);
}

std::shared_ptr<c10::GatheredContext> gather_all() {
  return torch::CapturedTraceback::gather(python_thread(), true, true);
}
// LITERALINCLUDE END: GATHER_CONTEXT

void record_memory_history(const std::optional<std::string>& enabled, const std::optional<std::string>& context,
                           const std::string& stacks, size_t max_entries) {
  TORCH_CHECK(!enabled || *enabled == "state" || *enabled == "all",
              "_record_memory_history: enabled must be None, 'state' or 'all', got '", *enabled, "'");
  TORCH_CHECK(!context || *context == "state" || *context == "alloc" || *context == "all",
              "_record_memory_history: context must be None, 'state', 'alloc' or 'all', got '", *context, "'");
  TORCH_CHECK(stacks == "python" || stacks == "all",
              "_record_memory_history: stacks must be 'python' or 'all', got '", stacks, "'");
  RecordContext when = RecordContext::NEVER;
  if (context) {
    when = *context == "state" ? RecordContext::STATE
         : *context == "alloc" ? RecordContext::ALLOC
                               : RecordContext::ALL;
  }
  // enabled="state" keeps the contexts of live blocks but no trace.
  device_allocator()->recordHistory(enabled.has_value(), stacks == "all" ? &gather_all : &gather_python,
                                    enabled && *enabled == "all" ? max_entries : 0, when);
}

const char* action_name(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::ALLOC: return "alloc";
    case TraceEntry::FREE_REQUESTED: return "free_requested";
    case TraceEntry::FREE_COMPLETED: return "free_completed";
    case TraceEntry::SEGMENT_ALLOC: return "segment_alloc";
    case TraceEntry::SEGMENT_FREE: return "segment_free";
    case TraceEntry::SEGMENT_MAP: return "segment_map";
    case TraceEntry::SEGMENT_UNMAP: return "segment_unmap";
    case TraceEntry::SNAPSHOT: return "snapshot";
    case TraceEntry::OOM: return "oom";
  }
  return "unknown";
}

// LITERALINCLUDE START: SNAPSHOT_DICT
// The snapshot as the dict torch.cuda.memory._snapshot() returns, so that
// torch.cuda._memory_viz reads it. Stacks are symbolized in one batch.
py::dict snapshot_dict(const AllocatorSnapshot& snap) {
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::vector<py::dict> with_frames;
  auto frames_of = [&](py::dict& d, const std::shared_ptr<c10::GatheredContext>& context) {
    d["frames"] = py::list();
    if (auto* tb = dynamic_cast<torch::CapturedTraceback*>(context.get())) {
      tracebacks.push_back(tb);
      with_frames.push_back(d);
    }
  };
  py::list segments;
  for (const auto& segment : snap.segments) {
    py::dict s;
    s["device"] = segment.device;
    s["address"] = segment.address;
    s["total_size"] = segment.total_size;
    s["allocated_size"] = segment.allocated_size;
    s["active_size"] = segment.active_size;
    s["requested_size"] = segment.requested_size;
    s["stream"] = reinterpret_cast<uintptr_t>(segment.stream);
    s["segment_type"] = segment.is_large ? "large" : "small";
    s["segment_pool_id"] = py::make_tuple(segment.owner_private_pool_id.first, segment.owner_private_pool_id.second);
    s["is_expandable"] = segment.is_expandable;
    s["frames"] = py::list();
    py::list blocks;
    size_t address = segment.address;
    for (const auto& block : segment.blocks) {
      py::dict b;
      b["address"] = address;
      b["size"] = block.size;
      b["requested_size"] = block.requested_size;
      b["state"] = block.allocated ? "active_allocated" : block.active ? "active_pending_free" : "inactive";
      frames_of(b, block.context_when_allocated);
      blocks.append(b);
      address += block.size;
    }
    s["blocks"] = blocks;
    segments.append(s);
  }
  py::list device_traces;
  for (const auto& trace : snap.device_traces) {
    py::list entries;
    for (const TraceEntry& e : trace) {
      py::dict d;
      d["action"] = action_name(e.action_);
      d[e.action_ == TraceEntry::OOM ? "device_free" : "addr"] = e.addr_;
      d["size"] = e.size_;
      d["stream"] = reinterpret_cast<uintptr_t>(e.stream_);
      d["time_us"] = e.time_.approx_t_ / 1000;
      d["compile_context"] = e.compile_context_;
      d["user_metadata"] = e.user_metadata_;
      frames_of(d, e.context_);
      entries.append(d);
    }
    device_traces.append(entries);
  }
  std::vector<py::object> symbolized = torch::py_symbolize(tracebacks);
  for (size_t i = 0; i < symbolized.size(); ++i) {
    with_frames[i]["frames"] = symbolized[i];
  }
  py::dict out;
  out["segments"] = segments;
  out["device_traces"] = device_traces;
  out["allocator_settings"] = py::dict();
  out["external_annotations"] = py::list();
  return out;
}
// LITERALINCLUDE END: SNAPSHOT_DICT

} // namespace

void init_memory_bindings(pybind11::module& m) {
  // LITERALINCLUDE START: POOL_BINDINGS
  m.def("_mem_pool_create", [](c10::DeviceIndex device, std::shared_ptr<PluggableAllocatorFns> allocator,
                               bool use_on_oom, bool no_split) {
    const c10::MempoolId_t id = EmuDeviceAllocator::graph_pool_handle(/*is_user_created=*/true);
    device_allocator()->createOrIncrefPool(device, id, std::move(allocator), use_on_oom, no_split);
    return id;
  }, py::arg("device"), py::arg("allocator").none(true), py::arg("use_on_oom"), py::arg("no_split"));
  // What a dying MemPool does: drop its use, and its unused segments.
  m.def("_mem_pool_destroy", [](c10::DeviceIndex device, std::pair<uint64_t, uint64_t> id) {
    device_allocator()->releasePool(device, to_id(id));
    device_allocator()->emptyCache(to_id(id));
  });
  m.def("_mem_pool_use_count", [](c10::DeviceIndex device, std::pair<uint64_t, uint64_t> id) {
    return device_allocator()->getPoolUseCount(device, to_id(id));
  });
  m.def("_begin_allocate_current_thread_to_pool", [](c10::DeviceIndex device, std::pair<uint64_t, uint64_t> id) {
    device_allocator()->beginAllocateCurrentThreadToPool(device, to_id(id));
  });
  m.def("_end_allocate_to_pool", [](c10::DeviceIndex device, std::pair<uint64_t, uint64_t> id) {
    device_allocator()->endAllocateToPool(device, to_id(id));
  });
  m.def("_release_pool", [](c10::DeviceIndex device, std::pair<uint64_t, uint64_t> id) {
    device_allocator()->releasePool(device, to_id(id));
  });
  m.def("_graph_pool_handle", [] { return EmuDeviceAllocator::graph_pool_handle(); });
  // LITERALINCLUDE END: POOL_BINDINGS

  m.def("_set_memory_fraction", [](double fraction, c10::DeviceIndex device) {
    device_allocator()->setMemoryFraction(fraction, device);
  });
  m.def("_get_memory_fraction", [](c10::DeviceIndex device) { return device_allocator()->getMemoryFraction(device); });

  // LITERALINCLUDE START: RAW_ALLOC_BINDINGS
  // caching_allocator_alloc: memory from the cache on `device` and `stream`,
  // owned by the caller until caching_allocator_delete.
  m.def("_caching_allocator_raw_alloc", [](size_t size, c10::DeviceIndex device, int64_t stream_id) {
    const c10::Stream stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), stream_id);
    native_stream(stream); // raises for a stream id that is not an emu stream
    c10::StreamGuard guard(stream);
    c10::DataPtr data = device_allocator()->allocate(size);
    void* ptr = data.get();
    data.release_context(); // the context is the pointer itself
    return reinterpret_cast<uintptr_t>(ptr);
  });
  m.def("_caching_allocator_raw_delete", [](uintptr_t ptr) {
    device_allocator()->raw_delete(reinterpret_cast<void*>(ptr));
  });
  // LITERALINCLUDE END: RAW_ALLOC_BINDINGS
  m.def("_caching_allocator_enable", [](bool enabled) { device_allocator()->setCachingEnabled(enabled); });
  m.def("_caching_allocator_is_enabled", [] { return device_allocator()->isCachingEnabled(); });

  // LITERALINCLUDE START: PLUGGABLE_BINDINGS
  // The addresses of a user's alloc and free, as ctypes found them.
  py::class_<PluggableAllocatorFns, std::shared_ptr<PluggableAllocatorFns>>(m, "_PluggableAllocator")
      .def(py::init([](uintptr_t alloc, uintptr_t free) {
        TORCH_CHECK(alloc != 0 && free != 0, "a pluggable allocator needs non-null alloc and free functions");
        auto fns = std::make_shared<PluggableAllocatorFns>();
        fns->alloc = reinterpret_cast<decltype(fns->alloc)>(alloc);
        fns->free = reinterpret_cast<decltype(fns->free)>(free);
        return fns;
      }));
  m.def("_change_current_allocator", [](std::shared_ptr<PluggableAllocatorFns> fns) {
    device_allocator()->setPluggable(std::move(fns));
  });
  m.def("_allocator_backend", [] { return device_allocator()->isPluggable() ? "pluggable" : "native"; });
  // LITERALINCLUDE END: PLUGGABLE_BINDINGS

  m.def("_host_memory_stats", [] {
    const at::HostStats stats = at::getHostAllocator(at::kPrivateUse1)->get_stats();
    py::dict d;
    d["num_host_alloc"] = stats.num_host_alloc;
    d["num_host_free"] = stats.num_host_free;
    d["allocations"] = stat_dict(stats.allocations);
    d["allocated_bytes"] = stat_dict(stats.allocated_bytes);
    d["active_requests"] = stat_dict(stats.active_requests);
    d["active_bytes"] = stat_dict(stats.active_bytes);
    d["host_alloc_time"] = duration_dict(stats.host_alloc_time);
    d["host_free_time"] = duration_dict(stats.host_free_time);
    return d;
  });
  m.def("_reset_accumulated_host_memory_stats",
        [] { at::getHostAllocator(at::kPrivateUse1)->reset_accumulated_stats(); });
  m.def("_reset_peak_host_memory_stats", [] { at::getHostAllocator(at::kPrivateUse1)->reset_peak_stats(); });

  m.def("_record_memory_history", &record_memory_history);
  m.def("_memory_snapshot", [](std::pair<uint64_t, uint64_t> id, bool include_traces) {
    return snapshot_dict(device_allocator()->snapshot(to_id(id), include_traces));
  });
}

} // namespace torch_emu
