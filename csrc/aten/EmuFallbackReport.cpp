#include "aten/EmuFallbackReport.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace torch_emu {
namespace {

std::atomic<bool> g_recording{false};
std::atomic<bool> g_error{false};
std::atomic<bool> g_watched{false};
std::mutex g_mutex;

std::unordered_map<std::string, FallbackRecord>& records() {
  static auto* map = new std::unordered_map<std::string, FallbackRecord>(); // outlives exit-time reports
  return *map;
}

void update_watched() {
  g_watched.store(g_recording.load() || g_error.load(), std::memory_order_relaxed);
}

} // namespace

void set_fallback_recording(bool on) {
  g_recording = on;
  update_watched();
}

void set_fallback_error(bool on) {
  g_error = on;
  update_watched();
}

bool fallback_watched() {
  return g_watched.load(std::memory_order_relaxed);
}

bool fallback_is_error() {
  return g_error.load(std::memory_order_relaxed);
}

void record_fallback(const c10::OperatorName& op, int64_t nanoseconds) {
  if (!g_recording.load(std::memory_order_relaxed)) {
    return;
  }
  std::string name = op.overload_name.empty() ? op.name : op.name + "." + op.overload_name;
  std::lock_guard<std::mutex> lock(g_mutex);
  FallbackRecord& r = records()[name];
  r.op = std::move(name);
  r.count += 1;
  r.nanoseconds += nanoseconds;
}

std::vector<FallbackRecord> take_fallback_records() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<FallbackRecord> out;
  out.reserve(records().size());
  for (auto& entry : records()) {
    out.push_back(std::move(entry.second));
  }
  records().clear();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.nanoseconds > b.nanoseconds; });
  return out;
}

std::vector<std::string>& fallback_routed_ops() {
  static auto* ops = new std::vector<std::string>();
  return *ops;
}

} // namespace torch_emu
