#include "aten/kernels/EmuKernel.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/util/TypeCast.h>

#include <algorithm>

namespace torch_emu::kernel {

at::Tensor new_output(c10::IntArrayRef sizes, c10::IntArrayRef strides, const at::TensorOptions& options) {
  const auto dtype = c10::optTypeMetaToScalarType(options.dtype_opt());
  return strides.empty() ? empty_memory_format(sizes, dtype, std::nullopt, options.device_opt(), std::nullopt,
                                               options.memory_format_opt())
                         : empty_strided(sizes, strides, dtype, std::nullopt, options.device_opt(), std::nullopt);
}

at::Tensor host_output(c10::IntArrayRef sizes, c10::IntArrayRef strides, const at::TensorOptions& options) {
  const at::TensorOptions host = options.device(at::kCPU);
  return strides.empty() ? at::empty(sizes, host) : at::empty_strided(sizes, strides, host);
}

uint64_t dtypes_key_of(std::initializer_list<uint64_t> parts) {
  uint64_t key = 1469598103934665603ull; // FNV-1a over the parts
  for (const uint64_t part : parts) {
    key = (key ^ part) * 1099511628211ull;
  }
  return key == 0 ? 1 : key; // 0 means "none yet" in CheckedDtypes::last_
}

bool CheckedDtypes::contains(uint64_t key) const {
  if (last_.load(std::memory_order_relaxed) == key) {
    return true;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

void CheckedDtypes::add(uint64_t key) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) {
      keys_.push_back(key);
    }
  }
  last_.store(key, std::memory_order_relaxed);
}

at::Tensor stand_in(const at::Tensor& t, int64_t size) {
  if (!t.defined()) {
    return t;
  }
  at::Tensor host = at::zeros(c10::DimVector(t.dim(), size), t.options().device(at::kCPU));
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    host.unsafeGetTensorImpl()->set_wrapped_number(true);
  }
  return host;
}

void run_dtype_check(c10::function_ref<void()> dry_run, bool all_errors) {
  struct Discard final : c10::WarningHandler {
    void process(const c10::Warning&) override {}
  } discard;
  const c10::WarningUtils::WarningHandlerGuard quiet(&discard);
  try {
    dry_run();
  } catch (const c10::NotImplementedError&) {
    throw;
  } catch (const std::exception&) {
    if (all_errors) {
      throw;
    } // else a stand-in's shape, not the arguments' dtypes
  }
}

void check_inplace(const at::Tensor& self, c10::IntArrayRef sizes, const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == self.dtype(), "Bad in-place call: input tensor dtype ", self.dtype(),
              " and output tensor dtype ", options.dtype(), " should match");
  TORCH_CHECK(options.device() == self.device(), "Bad in-place call: input tensor device ", self.device(),
              " and output tensor device ", options.device(), " should match");
  TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: input tensor size ", self.sizes(),
              " and output tensor size ", sizes, " should match");
}

// With CPU's messages; the strides meta() asks for are only advisory when
// `out` already has the right size.
void resize_out(const at::Tensor& out, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ", options.dtype(), ", but got ",
              out.dtype(), " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ", options.device(),
              ", but got ", out.device(), " instead");
  if (at::native::resize_output(out, sizes)) {
    if (!strides.empty()) {
      out.as_strided_(sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
    }
  }
}

} // namespace torch_emu::kernel

namespace torch_emu::kernel {

// LITERALINCLUDE START: WRAPPED_NUMBER
c10::MaybeOwned<at::Tensor> match_wrapped_number(const at::Tensor& t, const at::Tensor& like) {
  if (!t.defined() || !t.unsafeGetTensorImpl()->is_wrapped_number() || !like.defined() ||
      like.unsafeGetTensorImpl()->is_wrapped_number() || t.scalar_type() == like.scalar_type()) {
    return c10::MaybeOwned<at::Tensor>::borrowed(t);
  }
  // bool < integer < floating < complex: a number of a higher kind promotes
  // the result (int tensor * 2.5 is float), which the iterator must decide.
  const auto kind = [](at::ScalarType s) {
    return at::isComplexType(s) ? 3 : at::isFloatingType(s) ? 2 : s == at::kBool ? 0 : 1;
  };
  if (kind(t.scalar_type()) > kind(like.scalar_type())) {
    return c10::MaybeOwned<at::Tensor>::borrowed(t);
  }
  // A 16-bit float kernel computes in float and reads the number as a float
  // (half * 1e10 is 0 for 0, not 0 * inf): left to CPU's iterator, as are the
  // dtypes without a Scalar of their own (uint16 to uint64, float8...).
  switch (like.scalar_type()) { // the dtypes AT_ALL_TYPES_AND_COMPLEX and bool cover, below
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong: case at::kBool:
    case at::kFloat: case at::kDouble: case at::kComplexFloat: case at::kComplexDouble: break;
    default: return c10::MaybeOwned<at::Tensor>::borrowed(t);
  }
  // Converted as CPU's kernels read a scalar operand, with c10::convert and no
  // overflow check: uint8 + 1000 wraps around, float32 * 1e300 is inf.
  std::optional<c10::Scalar> value;
  auto convert = [&](auto number) {
    AT_DISPATCH_V2(like.scalar_type(), "match_wrapped_number",
                   AT_WRAP([&] { value = c10::Scalar(c10::convert<scalar_t>(number)); }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool);
  };
  switch (t.scalar_type()) { // the types Python numbers are wrapped as
    case at::kDouble: convert(*t.const_data_ptr<double>()); break;
    case at::kLong: convert(*t.const_data_ptr<int64_t>()); break;
    case at::kBool: convert(*t.const_data_ptr<bool>()); break;
    case at::kComplexDouble: convert(*t.const_data_ptr<c10::complex<double>>()); break;
    default: return c10::MaybeOwned<at::Tensor>::borrowed(t);
  }
  at::Tensor converted = at::detail::scalar_tensor_static(*value, like.scalar_type(), at::kCPU);
  converted.unsafeGetTensorImpl()->set_wrapped_number(true);
  return c10::MaybeOwned<at::Tensor>::owned(std::move(converted));
}
// LITERALINCLUDE END: WRAPPED_NUMBER


std::string name_in_signature(std::string_view pretty, std::string_view parameter) {
  const size_t start = pretty.find(parameter);
  if (start == std::string_view::npos) {
    return std::string(pretty);
  }
  std::string_view name = pretty.substr(start + parameter.size());
  name = name.substr(0, name.find_first_of(";]"));
  // A cast picks an overload: "(at::Tensor& (*)(at::Tensor&, double))(& at::native::normal_)".
  if (!name.empty() && name.front() == '(' && name.back() == ')') {
    name = name.substr(name.rfind('(') + 1);
    name.remove_suffix(1);
  }
  while (!name.empty() && (name.front() == '&' || name.front() == ' ')) {
    name.remove_prefix(1);
  }
  return std::string(name);
}

} // namespace torch_emu::kernel
