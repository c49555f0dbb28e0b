// Stream capture and graphs (emu_runtime_graphs.h).
//
// A capture is a side record of its stream (the stream itself is unchanged):
// streams.cpp asks capture_node() about every piece of work submitted from
// outside running work, and the synchronising calls ask forbid_if_*().

#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/emu_runtime_faults.h"
#include "runtime/emu_runtime_graphs.h"
#include "runtime/runtime_internal.h"

using emu::set_error;

struct emuGraph {
  std::vector<emu::GraphNode> nodes;
  std::vector<std::pair<void*, emuHostFn_t>> objects;  // emuStreamAttachToCapture
  ~emuGraph() {
    for (const emu::GraphNode& node : nodes) {
      if (node.event != nullptr) emu::release_event(node.event);
    }
    for (auto it = objects.rbegin(); it != objects.rend(); ++it) it->second(it->first);
  }
};

namespace emu {

std::atomic<int> g_active_captures{0};

namespace {

struct Capture {
  int device = 0;
  bool invalidated = false;
  const char* invalidated_by = nullptr;
  emuGraph* graph = nullptr;  // owned until emuStreamEndCapture hands it out
  MemorySnapshot memory;
};

// The captures in progress, by stream. Few and short-lived: one lock.
struct Captures {
  std::mutex mu;
  std::unordered_map<emuStream_t, Capture> by_stream;
};
Captures& captures() {
  static Captures* const c = new Captures;  // leaked, like the stream registry
  return *c;
}

emuError_t forbid(const char* call, Capture& capture) {
  if (!capture.invalidated) {
    capture.invalidated = true;
    capture.invalidated_by = call;
  }
  return set_error(emuErrorStreamCaptureUnsupported,
                   "%s: operation not permitted while a stream of emu:%d is capturing a graph (it "
                   "would wait for captured work, which does not run until the graph is "
                   "replayed); the capture is invalidated",
                   call, capture.device);
}

} // namespace

emuError_t capture_node(const char* call, emuStream_t stream, const GraphNode& node, bool* captured) {
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_stream.find(stream);
  *captured = it != c.by_stream.end();
  if (!*captured) return emuSuccess;
  if (it->second.invalidated) {
    return set_error(emuErrorStreamCaptureInvalidated,
                     "%s: the capture on this stream was invalidated by %s", call,
                     it->second.invalidated_by);
  }
  if (node.event != nullptr) retain_event(node.event);
  it->second.graph->nodes.push_back(node);
  if (node.kind == GraphNode::kKernel && launch_name() != nullptr) {
    it->second.graph->nodes.back().launch_name = launch_name();
  }
  return emuSuccess;
}

emuError_t forbid_if_capturing(const char* call, emuStream_t stream) {
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_stream.find(stream);
  return it == c.by_stream.end() ? emuSuccess : forbid(call, it->second);
}

emuError_t forbid_if_device_capturing(const char* call, int device) {
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [stream, capture] : c.by_stream) {
    if (capture.device == device) return forbid(call, capture);
  }
  return emuSuccess;
}

emuError_t forbid_if_event_captured(const char* call, emuEvent_t event) {
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [stream, capture] : c.by_stream) {
    for (const GraphNode& node : capture.graph->nodes) {
      if (node.kind == GraphNode::kEventRecord && node.event == event) return forbid(call, capture);
    }
  }
  return emuSuccess;
}

} // namespace emu

extern "C" {

// LITERALINCLUDE START: BEGIN_END_CAPTURE
emuError_t emuStreamBeginCapture(emuStream_t stream) {
  EMU_API_ENTER();
  if (stream == nullptr) return set_error(emuErrorInvalidResourceHandle, "emuStreamBeginCapture: stream is null");
  emu::Captures& c = emu::captures();
  // Checked before and after waiting for the stream's earlier work (which
  // must not be waited for if the stream captures already).
  const auto check_free = [&](int device) -> emuError_t {
    for (const auto& [other, running] : c.by_stream) {
      if (other == stream || running.device == device) {
        return set_error(emuErrorInvalidValue,
                         "emuStreamBeginCapture: %s on emu:%d is capturing already (one capture "
                         "per device at a time)",
                         other == stream ? "this stream" : "another stream", device);
      }
    }
    return emuSuccess;
  };
  emu::Capture capture;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.by_stream.count(stream) != 0) return check_free(c.by_stream.at(stream).device);
  }
  if (emuError_t err = emuStreamSynchronize(stream)) return err;  // also validates the handle
  capture.device = emu::stream_device(stream);
  std::lock_guard<std::mutex> lock(c.mu);
  if (emuError_t err = check_free(capture.device)) return err;
  emu::snapshot_device_memory(capture.device, &capture.memory);
  capture.graph = new emuGraph;
  c.by_stream.emplace(stream, std::move(capture));
  emu::g_active_captures.fetch_add(1);
  return emuSuccess;
}

emuError_t emuStreamEndCapture(emuStream_t stream, emuGraph_t* graph) {
  EMU_API_ENTER();
  if (graph == nullptr) return set_error(emuErrorInvalidValue, "emuStreamEndCapture: graph is null");
  *graph = nullptr;
  emu::Capture capture;
  {
    emu::Captures& c = emu::captures();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.by_stream.find(stream);
    if (it == c.by_stream.end()) {
      return set_error(emuErrorInvalidValue, "emuStreamEndCapture: stream %p is not capturing",
                       static_cast<void*>(stream));
    }
    capture = std::move(it->second);
    c.by_stream.erase(it);
    emu::g_active_captures.fetch_sub(1);
  }
  // The work ran once while it was recorded: undo what it wrote.
  emu::restore_device_memory(capture.device, capture.memory);
  if (capture.invalidated) {
    delete capture.graph;
    return set_error(emuErrorStreamCaptureInvalidated,
                     "emuStreamEndCapture: the capture was invalidated by %s during capture",
                     capture.invalidated_by);
  }
  *graph = capture.graph;
  return emuSuccess;
}
// LITERALINCLUDE END: BEGIN_END_CAPTURE

emuError_t emuStreamIsCapturing(emuStream_t stream, emuStreamCaptureStatus* status) {
  EMU_API_ENTER();
  if (status == nullptr) return set_error(emuErrorInvalidValue, "emuStreamIsCapturing: status is null");
  *status = emuStreamCaptureStatusNone;
  if (!emu::capture_active()) return emuSuccess;
  emu::Captures& c = emu::captures();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_stream.find(stream);
  if (it != c.by_stream.end()) {
    *status = it->second.invalidated ? emuStreamCaptureStatusInvalidated : emuStreamCaptureStatusActive;
  }
  return emuSuccess;
}

emuError_t emuStreamAttachToCapture(emuStream_t stream, void* object, emuHostFn_t destroy) {
  EMU_API_ENTER();
  if (destroy == nullptr) return set_error(emuErrorInvalidValue, "emuStreamAttachToCapture: destroy is null");
  emu::Captures& c = emu::captures();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_stream.find(stream);
  if (it == c.by_stream.end()) {
    return set_error(emuErrorInvalidValue, "emuStreamAttachToCapture: stream %p is not capturing",
                     static_cast<void*>(stream));
  }
  it->second.graph->objects.emplace_back(object, destroy);
  return emuSuccess;
}

// LITERALINCLUDE START: GRAPH_LAUNCH
emuError_t emuGraphLaunch(emuGraph_t graph, emuStream_t stream) {
  EMU_API_ENTER();
  if (graph == nullptr) return set_error(emuErrorInvalidResourceHandle, "emuGraphLaunch: graph is null");
  for (const emu::GraphNode& node : graph->nodes) {
    emuError_t err = emuSuccess;
    switch (node.kind) {
      case emu::GraphNode::kKernel: {
        // Under its captured name, so that a fault for one op matches its replays too.
        const char* caller_name = emu::launch_name();
        (void)emuFaultSetLaunchName(node.launch_name.empty() ? nullptr : node.launch_name.c_str());
        err = emuLaunchKernel(stream, node.kernel_fn, node.user_data);
        (void)emuFaultSetLaunchName(caller_name);
        break;
      }
      case emu::GraphNode::kMemcpy: err = emuMemcpyAsync(node.dst, node.src, node.bytes, node.copy_kind, stream); break;
      case emu::GraphNode::kHostFunc: err = emuLaunchHostFunc(stream, node.host_fn, node.user_data); break;
      case emu::GraphNode::kEventRecord: err = emuEventRecord(node.event, stream); break;
      case emu::GraphNode::kEventWait: err = emuStreamWaitEvent(stream, node.event); break;
    }
    if (err != emuSuccess) return err;
  }
  return emuSuccess;
}
// LITERALINCLUDE END: GRAPH_LAUNCH

emuError_t emuGraphGetNodeCount(emuGraph_t graph, size_t* count) {
  EMU_API_ENTER();
  if (graph == nullptr || count == nullptr) return set_error(emuErrorInvalidValue, "emuGraphGetNodeCount: null argument");
  *count = graph->nodes.size();
  return emuSuccess;
}

emuError_t emuGraphDescribeNode(emuGraph_t graph, size_t index, char* text, size_t size) {
  EMU_API_ENTER();
  if (graph == nullptr || text == nullptr || index >= graph->nodes.size()) {
    return set_error(emuErrorInvalidValue, "emuGraphDescribeNode: bad graph, index or buffer");
  }
  const emu::GraphNode& node = graph->nodes[index];
  static const char* const kCopyKinds[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice"};
  switch (node.kind) {
    case emu::GraphNode::kKernel: std::snprintf(text, size, "kernel %p", node.user_data); break;
    case emu::GraphNode::kMemcpy:
      std::snprintf(text, size, "memcpy %s %zu bytes", kCopyKinds[node.copy_kind], node.bytes);
      break;
    case emu::GraphNode::kHostFunc: std::snprintf(text, size, "host function"); break;
    case emu::GraphNode::kEventRecord: std::snprintf(text, size, "event record %p", static_cast<void*>(node.event)); break;
    case emu::GraphNode::kEventWait: std::snprintf(text, size, "event wait %p", static_cast<void*>(node.event)); break;
  }
  return emuSuccess;
}

emuError_t emuGraphDestroy(emuGraph_t graph) {
  EMU_API_ENTER_RELEASE();
  delete graph;
  return emuSuccess;
}

} // extern "C"
