// The Kineto activity profiler for emu: device tracks in torch.profiler.
//
// torch.profiler.profile(activities=[..., ProfilerActivity.PrivateUse1]) asks
// Kineto for device activities; Kineto asks the IActivityProfiler a backend
// registers with REGISTER_PRIVATEUSE1_PROFILER for a session per trace. Emu's
// session turns on the runtime's activity tracing (emu_runtime_trace.h) while
// it records and turns each runtime record into two Kineto activities, as
// CUPTI's are for CUDA:
// - the host call that submitted the work ("emuLaunchKernel", on the CPU
//   thread that made it), linked to the framework op that was running;
// - the work on the device (kernel or memcpy), on a track per emu device
//   (pid) and stream (tid), with a flow arrow from the host call.
//
// libtorch is built with Kineto; its plugin header hides the registry unless
// USE_KINETO is defined, which our build does not do globally.
#ifndef USE_KINETO
#define USE_KINETO
#endif
// Kineto's activities format their metadata with fmt, which libtorch links
// in without exporting it: this file compiles its own (header-only) copy.
#define FMT_HEADER_ONLY
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <ATen/record_function.h>
#include <libkineto.h>
#include <output_base.h>
#include <unistd.h>

#include <fmt/format.h>

#include <deque>
#include <set>
#include <utility>

#include "core/EmuException.h"
#include "runtime/emu_runtime_trace.h"

namespace torch_emu {
namespace {

using libkineto::ActivityType;
using libkineto::GenericTraceActivity;

// Kineto puts CPU threads under the process id; device tracks use the device
// index as pid (as CUDA's do), sorted after the CPU.
constexpr int64_t kDeviceSortBase = 0x1000000;

const char* copy_name(emuMemcpyKind kind) {
  switch (kind) {
    case emuMemcpyHostToHost: return "Memcpy HtoH";
    case emuMemcpyHostToDevice: return "Memcpy HtoD";
    case emuMemcpyDeviceToHost: return "Memcpy DtoH";
    case emuMemcpyDeviceToDevice: return "Memcpy DtoD";
  }
  return "Memcpy";
}

// LITERALINCLUDE START: KERNEL_NAMES
// Kernels are named after the innermost operator running when they were
// launched ("aten::mm"): the runtime takes the name from its per-thread name
// stack, which this RecordFunction callback maintains while a session records
// (and costs nothing otherwise: it is only installed then).
std::unique_ptr<at::ObserverContext> push_op_name(const at::RecordFunction& fn) {
  (void)emuTracePushName(fn.name());
  return nullptr;
}

void pop_op_name(const at::RecordFunction& /*fn*/, at::ObserverContext* /*ctx*/) {
  (void)emuTracePopName();
}
// LITERALINCLUDE END: KERNEL_NAMES

// LITERALINCLUDE START: KINETO_SESSION
class EmuActivitySession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    names_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&push_op_name, &pop_op_name).scopes({at::RecordScope::FUNCTION}));
    EMU_CHECK(emuTraceEnable());
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    at::removeCallback(names_);
    EMU_CHECK(emuTraceDisable());
    // Work submitted while recording is recorded when it completes: wait for
    // it. Best effort (Kineto's stop must not throw): a runtime that cannot
    // synchronise (a forked child) has recorded what it completed.
    int count = 0;
    if (emuGetDeviceCount(&count) == emuSuccess) {
      for (int device = 0; device < count; ++device) {
        (void)emuDeviceSynchronize(device);
      }
    }
    EMU_CHECK(emuTraceFlush(&EmuActivitySession::keep, this));
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  // Kineto calls these around every framework op on the op's thread; the
  // runtime stamps work with the innermost id, which is the op's correlation
  // id in PyTorch's profiler, so Kineto can link the two.
  void pushCorrelationId(uint64_t id) override {
    (void)emuTracePushExternalCorrelation(id);
  }
  void popCorrelationId() override {
    (void)emuTracePopExternalCorrelation();
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t start_time, int64_t end_time) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "emu");
    buffer_->span.iteration = 0;
    buffer_->span.opCount = static_cast<int>(records_.size());
    const libkineto::TraceSpan& span = buffer_->span;
    std::set<std::pair<int, uint64_t>> streams;
    for (const emuActivityRecord& r : records_) {
      const libkineto::ITraceActivity* op = r.external_correlation != 0 ? linked(r.external_correlation) : nullptr;
      const bool kernel = r.kind == emuActivityKindKernel;

      auto& call = add(span, ActivityType::PRIVATEUSE1_RUNTIME,
                       kernel ? "emuLaunchKernel" : (r.stream == 0 ? "emuMemcpy" : "emuMemcpyAsync"), r, op);
      call.device = getpid();
      call.resource = call.threadId = r.api_thread;
      call.startTime = r.api_start_ns;
      call.endTime = r.api_end_ns;
      call.flow.start = true;

      auto& work = add(span, kernel ? ActivityType::CONCURRENT_KERNEL : ActivityType::GPU_MEMCPY,
                       kernel ? r.name : copy_name(r.copy_kind), r, op);
      work.device = r.device;
      work.resource = static_cast<int32_t>(r.stream);
      work.startTime = r.start_ns;
      work.endTime = r.end_ns;
      work.addMetadata("device", r.device);
      work.addMetadata("stream", r.stream);
      if (!kernel) {
        work.addMetadata("bytes", r.bytes);
        const double ns = static_cast<double>(std::max<int64_t>(r.end_ns - r.start_ns, 1));
        work.addMetadata("memory bandwidth (GB/s)", static_cast<double>(r.bytes) / ns);
      }
      devices_.insert(r.device);
      streams.insert({r.device, r.stream});
    }
    // The first device's goes through getDeviceInfo (which tells Kineto not
    // to name 16 "GPU" processes), the others' directly.
    for (auto it = std::next(devices_.begin()); it != devices_.end(); ++it) {
      logger.handleDeviceInfo(device_info(*it), start_time);
    }
    for (const auto& [device, stream] : streams) {
      const auto id = static_cast<int64_t>(stream);
      logger.handleResourceInfo(
          {id, id, device, stream == 0 ? std::string("emuMemcpy (synchronous)") : fmt::format("stream {}", stream)},
          start_time);
    }
    for (const auto& activity : buffer_->activities) {
      logger.handleActivity(*activity);
    }
    records_.clear();
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }
  std::vector<std::string> errors() override {
    return {};
  }
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(device_info(*devices_.begin()));
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {};
  }

 private:
  static void keep(const emuActivityRecord* record, void* self) {
    auto* session = static_cast<EmuActivitySession*>(self);
    // The runtime's copy of the name dies after the call.
    session->names_kept_.emplace_back(record->name != nullptr ? record->name : "");
    session->records_.push_back(*record);
    session->records_.back().name = session->names_kept_.back().c_str();
  }

  // Runtime and device activities of one record share the runtime's
  // correlation id (the flow arrow between them) and the framework op.
  GenericTraceActivity& add(const libkineto::TraceSpan& span, ActivityType type, const std::string& name,
                            const emuActivityRecord& r, const libkineto::ITraceActivity* op) {
    buffer_->emplace_activity(span, type, name);
    GenericTraceActivity& a = *buffer_->activities.back();
    a.id = static_cast<int32_t>(r.correlation);
    a.linked = op;
    a.flow.id = static_cast<uint32_t>(r.correlation);
    a.flow.type = libkineto::kLinkAsyncCpuGpu;
    a.addMetadata("correlation", r.correlation);
    return a;
  }

  static libkineto::DeviceInfo device_info(int device) {
    const std::string name = fmt::format("emu:{}", device);
    return {device, kDeviceSortBase + device, name, name};
  }

  at::CallbackHandle names_ = at::INVALID_CALLBACK_HANDLE;
  std::set<int> devices_{0}; // with activities, plus 0 (named even when idle)
  std::vector<emuActivityRecord> records_;
  std::deque<std::string> names_kept_; // stable addresses for records_[i].name
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};
// LITERALINCLUDE END: KINETO_SESSION

// LITERALINCLUDE START: KINETO_REGISTER
class EmuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config& /*config*/) override {
    // PRIVATEUSE1_RUNTIME alone comes with CPU-only profiling: no device trace.
    if (types.count(ActivityType::CONCURRENT_KERNEL) == 0 && types.count(ActivityType::GPU_MEMCPY) == 0) {
      return nullptr;
    }
    return std::make_unique<EmuActivitySession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"emu"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                     ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(EmuActivityProfiler);
// LITERALINCLUDE END: KINETO_REGISTER

} // namespace
} // namespace torch_emu
