// The two device kernels of torch.amp.GradScaler, native for emu:
//   _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
//   _amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval)
// GradScaler calls them on the device that holds the gradients so that
// checking and unscaling never needs the host to look at a value; only
// GradScaler.step reads found_inf (one .item() per device). Each runs as one
// kernel on the current stream of its device, through queue_kernel, on CPU
// aliases of the device buffers (HostAliases).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <functional>

#include "aten/EmuHostAlias.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

bool is_emu(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A one-element tensor of `dtype` on `device`, as the CUDA kernels require.
void check_scalar_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype, const c10::Device& device) {
  TORCH_CHECK(t.device() == device, name, " must be on ", device, " (the device of the other arguments), got ",
              t.device());
  TORCH_CHECK(t.numel() == 1, name, " must be a one-element tensor, got ", t.numel(), " elements");
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be a ", dtype, " tensor, got ", t.scalar_type());
  TORCH_CHECK(t.layout() == at::kStrided, name, " must be a strided tensor");
}

// LITERALINCLUDE START: AMP_UNSCALE_LOOP
// Multiplies every element of a contiguous gradient by inv_scale (in float,
// as CUDA does for half and bfloat16) and reports whether any element was
// inf or NaN. Non-finite values are multiplied too (they stay non-finite):
// the step is skipped anyway.
template <typename scalar_t>
bool unscale_contiguous(scalar_t* data, int64_t n, float inv_scale) {
  using opmath_t = at::opmath_type<scalar_t>;
  const opmath_t factor = static_cast<opmath_t>(inv_scale);
  std::atomic<bool> non_finite{false};
  at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
    bool local = false;
    for (int64_t i = begin; i < end; ++i) {
      const opmath_t v = static_cast<opmath_t>(data[i]);
      local |= !std::isfinite(v);
      data[i] = static_cast<scalar_t>(v * factor);
    }
    if (local) {
      non_finite.store(true, std::memory_order_relaxed);
    }
  });
  return non_finite.load(std::memory_order_relaxed);
}
// LITERALINCLUDE END: AMP_UNSCALE_LOOP

// One gradient (a CPU alias of device memory, inside the kernel). A strided
// gradient goes through a contiguous temporary, itself device memory since it
// is allocated inside the kernel, and is written back.
bool unscale_one(const at::Tensor& grad, float inv_scale) {
  at::Tensor work = grad.is_contiguous() ? grad : grad.contiguous();
  bool non_finite = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, work.scalar_type(),
                                  "_amp_foreach_non_finite_check_and_unscale_emu", [&] {
                                    non_finite = unscale_contiguous(work.mutable_data_ptr<scalar_t>(), work.numel(),
                                                                    inv_scale);
                                  });
  if (!work.is_same(grad)) {
    grad.copy_(work);
  }
  return non_finite;
}

// LITERALINCLUDE START: AMP_UNSCALE
void amp_foreach_non_finite_check_and_unscale(at::TensorList grads, at::Tensor& found_inf,
                                              const at::Tensor& inv_scale) {
  if (grads.empty()) {
    return;
  }
  TORCH_CHECK(is_emu(found_inf), "found_inf must be an emu tensor, got ", found_inf.device());
  const c10::Device device = found_inf.device();
  check_scalar_tensor(found_inf, "found_inf", at::kFloat, device);
  check_scalar_tensor(inv_scale, "inv_scale", at::kFloat, device);
  for (const at::Tensor& g : grads) {
    TORCH_CHECK(g.device() == device, "all gradients must be on ", device, " (the device of found_inf), got ",
                g.device());
    TORCH_CHECK(g.layout() == at::kStrided, "_amp_foreach_non_finite_check_and_unscale_ supports strided "
                "(dense) gradients only; got layout ", g.layout());
    TORCH_CHECK(at::isFloatingType(g.scalar_type()),
                "gradients must be floating point to be unscaled, got ", g.scalar_type());
  }

  const c10::DeviceGuard guard(device);
  HostAliases aliases;
  c10::SmallVector<at::Tensor, 16> grad_aliases;
  grad_aliases.reserve(grads.size());
  for (const at::Tensor& g : grads) {
    grad_aliases.push_back(aliases.alias(g));
  }
  at::Tensor found_alias = aliases.alias(found_inf);
  at::Tensor inv_alias = aliases.alias(inv_scale);

  // By value: the stream worker runs it later, a graph at each replay
  // (EmuGraph.h); the emu storages are kept alive with it.
  auto run = [grad_aliases, found_alias, inv_alias] {
    const float inv = *inv_alias.const_data_ptr<float>();
    bool non_finite = false;
    for (const at::Tensor& g : grad_aliases) {
      if (g.numel() > 0) {
        non_finite |= unscale_one(g, inv);
      }
    }
    if (non_finite) {
      *found_alias.mutable_data_ptr<float>() = 1.0f; // only ever set, never cleared
    }
  };
  queue_kernel(current_stream(device.index()), run, [&]() -> std::function<void()> { return [run, memory = aliases.emu_storages()] { run(); }; });
}
// LITERALINCLUDE END: AMP_UNSCALE

// LITERALINCLUDE START: AMP_UPDATE_SCALE
// found_inf > 0: scale *= backoff, tracker = 0 (the step was skipped).
// Otherwise one more clean step: once there have been growth_interval in a
// row, scale *= growth (kept only if still finite) and tracker = 0; else
// tracker += 1.
at::Tensor& amp_update_scale(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  TORCH_CHECK(is_emu(scale), "scale must be an emu tensor, got ", scale.device());
  const c10::Device device = scale.device();
  check_scalar_tensor(scale, "current_scale", at::kFloat, device);
  check_scalar_tensor(growth_tracker, "growth_tracker", at::kInt, device);
  check_scalar_tensor(found_inf, "found_inf", at::kFloat, device);

  const c10::DeviceGuard guard(device);
  HostAliases aliases;
  at::Tensor scale_alias = aliases.alias(scale);
  at::Tensor tracker_alias = aliases.alias(growth_tracker);
  at::Tensor found_alias = aliases.alias(found_inf);

  auto run = [scale_alias, tracker_alias, found_alias, growth_factor, backoff_factor, growth_interval] {
    float* s = scale_alias.mutable_data_ptr<float>();
    int32_t* tracker = tracker_alias.mutable_data_ptr<int32_t>();
    if (*found_alias.const_data_ptr<float>() > 0.0f) {
      *s = static_cast<float>(*s * backoff_factor);
      *tracker = 0;
      return;
    }
    const int32_t successful = *tracker + 1;
    if (successful == growth_interval) {
      const float grown = static_cast<float>(*s * growth_factor);
      if (std::isfinite(grown)) {
        *s = grown;
      }
      *tracker = 0;
    } else {
      *tracker = successful;
    }
  };
  queue_kernel(current_stream(device.index()), run, [&]() -> std::function<void()> { return [run, memory = aliases.emu_storages()] { run(); }; });
  return scale;
}
// LITERALINCLUDE END: AMP_UPDATE_SCALE

} // namespace

// LITERALINCLUDE START: AMP_REGISTER
// Switchable with the other native kernels (EmuNativeKernels.cpp): without
// them GradScaler runs CPU's kernels through the fallback, also correctly.
void register_amp_kernels(torch::Library& m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(amp_foreach_non_finite_check_and_unscale));
  m.impl("_amp_update_scale_", TORCH_FN(amp_update_scale));
}
// LITERALINCLUDE END: AMP_REGISTER

} // namespace torch_emu
