// The performance model (emu_runtime_perf.h): read from TORCH_EMU_PROFILE at
// init, applied by streams.cpp and copies.cpp to the kernels and copies they run.

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/emu_runtime_perf.h"
#include "runtime/runtime_internal.h"

namespace emu {

PerformanceModel g_model;

namespace {

using Clock = std::chrono::steady_clock;

// LITERALINCLUDE START: PERF_PRESETS
// Common buses, as vendors quote them (GB/s = 1e9 bytes/s), with device
// memory of 0.9-2 TB/s and a few microseconds per launch.
struct Preset {
  const char* name;
  emuPerformanceModel figures;
};
constexpr Preset kPresets[] = {
    {"pcie3", {12e9, 12e9, 900e9, 10e9, 5e-6, 1.0}},
    {"pcie4", {25e9, 25e9, 1500e9, 20e9, 4e-6, 1.0}},
    {"pcie5", {50e9, 50e9, 2000e9, 40e9, 4e-6, 1.0}},
    {"nvlink", {25e9, 25e9, 2000e9, 300e9, 4e-6, 1.0}},
};
// LITERALINCLUDE END: PERF_PRESETS

// A number followed by one of `units` (name, factor), case-insensitive, with
// optional spaces. A bare number needs a unit named "": "h2d=10" taken as
// 10 B/s would stretch a small copy to minutes.
struct Unit {
  const char* name;
  double factor;
};
template <size_t N>
bool parse_quantity(const std::string& text, const Unit (&units)[N], double* out) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin || !(value >= 0)) return false;
  std::string unit;
  for (const char* p = end; *p != '\0'; ++p) {
    if (*p != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  }
  for (const Unit& u : units) {
    if (unit == u.name) {
      *out = value * u.factor;
      return true;
    }
  }
  return false;
}

constexpr Unit kRates[] = {{"b/s", 1}, {"kb/s", 1e3}, {"mb/s", 1e6}, {"gb/s", 1e9}, {"tb/s", 1e12}};
constexpr Unit kDurations[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
constexpr Unit kFactors[] = {{"", 1}, {"x", 1}};

// Holds the calling thread until `deadline`: asleep while far from it, then
// polling, so that short holds are not lengthened by the scheduler.
void hold_until(Clock::time_point deadline) {
  using namespace std::chrono_literals;
  for (;;) {
    const auto left = deadline - Clock::now();
    if (left <= 0ns) return;
    if (left > 300us) {
      std::this_thread::sleep_for(left - 200us);
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

} // namespace

bool parse_performance_model(const char* text, emuPerformanceModel* out, std::string* error) {
  emuPerformanceModel model{0, 0, 0, 0, 0, 1.0};
  std::string spec(text);
  size_t start = 0;
  for (bool first = true; start <= spec.size(); first = false) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = spec.substr(start, comma - start);
    start = comma + 1;
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      const Preset* preset = nullptr;
      for (const Preset& p : kPresets) {
        if (item == p.name) preset = &p;
      }
      if (preset == nullptr || !first) {
        *error = "'" + item + "' is not a preset (pcie3, pcie4, pcie5, nvlink; first) or key=value";
        return false;
      }
      model = preset->figures;
      continue;
    }
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    double x = 0;
    bool ok = true;
    const char* expected = "";
    if (key == "h2d" || key == "d2h" || key == "d2d" || key == "peer" || key == "copy") {
      ok = parse_quantity(value, kRates, &x) && x > 0;
      expected = "a rate above 0 with a unit, such as 10GB/s (B/s, KB/s, MB/s, GB/s or TB/s)";
      if (key == "h2d" || key == "copy") model.h2d_bytes_per_second = x;
      if (key == "d2h" || key == "copy") model.d2h_bytes_per_second = x;
      if (key == "d2d") model.d2d_bytes_per_second = x;
      if (key == "peer") model.peer_bytes_per_second = x;
    } else if (key == "launch") {
      ok = parse_quantity(value, kDurations, &x) && x <= 1.0;
      expected = "a duration of at most 1 s with a unit, such as 5us (s, ms, us or ns)";
      model.launch_latency_seconds = x;
    } else if (key == "slowdown") {
      ok = parse_quantity(value, kFactors, &x) && x >= 1.0;
      expected = "a factor >= 1, such as 2";
      model.kernel_slowdown = x;
    } else {
      *error = "unknown key '" + key + "' (h2d, d2h, copy, d2d, peer: rates such as 10GB/s; launch: a duration "
               "such as 5us; slowdown: a factor >= 1)";
      return false;
    }
    if (!ok) {
      *error = "bad value '" + value + "' for " + key + ": expected " + expected;
      return false;
    }
  }
  *out = model;
  return true;
}

void set_performance_model(const emuPerformanceModel& model) {
  g_model.figures = model;
  g_model.active = model.h2d_bytes_per_second > 0 || model.d2h_bytes_per_second > 0 ||
                   model.d2d_bytes_per_second > 0 || model.peer_bytes_per_second > 0 ||
                   model.launch_latency_seconds > 0 || model.kernel_slowdown > 1.0;
}

// LITERALINCLUDE START: PERF_HOLDS
void hold_copy(Clock::time_point start, int dst_device, int src_device, size_t bytes) {
  const emuPerformanceModel& m = g_model.figures;
  const double rate = dst_device >= 0 && src_device >= 0
                          ? (dst_device == src_device ? m.d2d_bytes_per_second : m.peer_bytes_per_second)
                      : dst_device >= 0 ? m.h2d_bytes_per_second
                      : src_device >= 0 ? m.d2h_bytes_per_second
                                        : 0.0;
  if (rate > 0) hold_until(start + seconds(static_cast<double>(bytes) / rate));
}

void hold_launch_latency() {
  if (g_model.figures.launch_latency_seconds > 0) {
    hold_until(Clock::now() + seconds(g_model.figures.launch_latency_seconds));
  }
}

void hold_kernel(Clock::time_point start) {
  const double slowdown = g_model.figures.kernel_slowdown;
  if (slowdown > 1.0) {
    const auto took = Clock::now() - start;
    hold_until(start + std::chrono::duration_cast<Clock::duration>(took * slowdown));
  }
}
// LITERALINCLUDE END: PERF_HOLDS

} // namespace emu

extern "C" emuError_t emuGetPerformanceModel(emuPerformanceModel* model) {
  EMU_API_ENTER();
  if (model == nullptr) return emu::set_error(emuErrorInvalidValue, "emuGetPerformanceModel: model is null");
  *model = emu::g_model.figures;
  return emuSuccess;
}
