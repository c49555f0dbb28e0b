// Recurrent networks (nn.LSTM, nn.GRU, nn.RNN and their cells) on emu.
//
// PyTorch's RNN code (ATen/native/RNN.cpp) branches on the device twice:
//  - In the LSTM and GRU cells. On CPU a cell is a chain of ordinary ops; on
//    CUDA, XPU and PrivateUse1 it is two matmuls and one fused kernel,
//    _thnn_fused_lstm_cell / _thnn_fused_gru_cell, whose backward is fused
//    too. They have no CPU kernel, so the fallback cannot run them: emu has
//    its own, below (the tanh/relu cells are ordinary ops everywhere).
//  - In nn.LSTM's op, aten::lstm, which hands a whole sequence to cuDNN on
//    CUDA and to oneDNN on CPU, and steps through the cells on any other
//    device. Emu registers its own aten::lstm and takes CPU's oneDNN route:
//    oneDNN's LSTM layer kernel, run on device memory.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/RNN.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/lstm.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using kernel::common_device;
using kernel::run_on;

// LITERALINCLUDE START: CELL_LOOPS
// Runs fn(b, j) for every batch row b and column j < columns, rows split over
// threads (enough elements per task to be worth one).
template <typename Fn>
void for_each_element(int64_t batch, int64_t columns, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, columns));
  at::parallel_for(0, batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t j = 0; j < columns; ++j) {
        fn(b, j);
      }
    }
  });
}

// Scratch of a kernel in the math dtype (float for float16 and bfloat16, as
// CUDA's kernels compute): allocated inside the launch, so in device memory.
template <typename acc_t>
at::Tensor scratch(int64_t rows, int64_t columns) {
  return at::empty({rows, columns}, at::dtype(c10::CppTypeToScalarType<acc_t>::value));
}

// Sigmoid and tanh, in place, on gate columns [first, first + count) * hidden
// of a scratch: PyTorch's CPU kernels, vectorized (with std::exp per element
// the whole cell took 2.5 times as long), run on the device memory.
void sigmoid_gates(at::Tensor& gates, int64_t hidden, int64_t first, int64_t count) {
  gates.narrow(1, first * hidden, count * hidden).sigmoid_();
}
void tanh_gates(at::Tensor& gates, int64_t hidden, int64_t first, int64_t count) {
  gates.narrow(1, first * hidden, count * hidden).tanh_();
}
// LITERALINCLUDE END: CELL_LOOPS

at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->contiguous() : at::Tensor();
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

// LITERALINCLUDE START: CELL_CHECKS
// The argument rules of a fused cell (CUDA's): input and hidden gates of one
// shape [batch, gates * hidden], the previous state [batch, hidden], both
// biases or none, each 1-D of gates * hidden elements, and one dtype.
void check_cell(const char* op, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& input_bias, const at::Tensor& hidden_bias, int64_t gates,
                const at::Tensor& prev) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.size(1) % gates == 0, op,
              ": expected input_gates of shape [batch, ", gates, " * hidden_size], got ", input_gates.sizes());
  TORCH_CHECK(hidden_gates.sizes() == input_gates.sizes(), op, ": hidden_gates of shape ", hidden_gates.sizes(),
              " does not match input_gates of shape ", input_gates.sizes());
  const int64_t batch = input_gates.size(0), hidden = input_gates.size(1) / gates;
  TORCH_CHECK(prev.dim() == 2 && prev.size(0) == batch && prev.size(1) == hidden, op,
              ": expected the previous state of shape [", batch, ", ", hidden, "], got ", prev.sizes());
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), op,
              ": input_bias and hidden_bias must be given together");
  for (const at::Tensor* bias : {&input_bias, &hidden_bias}) {
    TORCH_CHECK(!bias->defined() || (bias->dim() == 1 && bias->size(0) == gates * hidden), op,
                ": expected biases of shape [", gates * hidden, "], got ", bias->sizes());
  }
  for (const at::Tensor* t : {&hidden_gates, &prev, &input_bias, &hidden_bias}) {
    TORCH_CHECK(!t->defined() || t->scalar_type() == input_gates.scalar_type(), op,
                ": expected all tensors to have dtype ", input_gates.scalar_type(), ", got ", t->scalar_type());
  }
}
// LITERALINCLUDE END: CELL_CHECKS

// LITERALINCLUDE START: LSTM_CELL
// One LSTM step as one kernel: the gate pre-activations from both matmuls and
// the biases, their activations, the new cell and hidden state, and the
// activations kept as the workspace of the backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  const c10::DeviceIndex device = common_device(input_gates, hidden_gates, cx, input_bias, hidden_bias);
  const at::Tensor ig = input_gates.contiguous(), hg = hidden_gates.contiguous(), c = cx.contiguous();
  const at::Tensor bi = contiguous_or_undefined(input_bias), bh = contiguous_or_undefined(hidden_bias);
  check_cell("_thnn_fused_lstm_cell", ig, hg, bi, bh, 4, c);
  at::Tensor hy = at::empty(c.sizes(), c.options()), cy = at::empty(c.sizes(), c.options());
  at::Tensor workspace = at::empty(ig.sizes(), ig.options());
  const int64_t batch = c.size(0), hidden = c.size(1);
  run_on(device, [&] {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "_thnn_fused_lstm_cell", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      at::Tensor gates = scratch<acc_t>(batch, 4 * hidden), tanh_cy = scratch<acc_t>(batch, hidden);
      const scalar_t *igp = ig.const_data_ptr<scalar_t>(), *hgp = hg.const_data_ptr<scalar_t>();
      const scalar_t *bip = data_or_null<scalar_t>(bi), *bhp = data_or_null<scalar_t>(bh);
      const scalar_t* cxp = c.const_data_ptr<scalar_t>();
      scalar_t *hyp = hy.mutable_data_ptr<scalar_t>(), *cyp = cy.mutable_data_ptr<scalar_t>();
      scalar_t* wsp = workspace.mutable_data_ptr<scalar_t>();
      acc_t *gp = gates.mutable_data_ptr<acc_t>(), *tp = tanh_cy.mutable_data_ptr<acc_t>();
      for_each_element(batch, 4 * hidden, [&](int64_t b, int64_t j) {
        const int64_t k = b * 4 * hidden + j;
        gp[k] = acc_t(igp[k]) + acc_t(hgp[k]) + (bip != nullptr ? acc_t(bip[j]) + acc_t(bhp[j]) : acc_t(0));
      });
      sigmoid_gates(gates, hidden, 0, 2); // input, forget
      tanh_gates(gates, hidden, 2, 1);    // cell
      sigmoid_gates(gates, hidden, 3, 1); // output
      for_each_element(batch, hidden, [&](int64_t b, int64_t h) {
        const acc_t* g = gp + b * 4 * hidden + h;
        tp[b * hidden + h] = g[hidden] * acc_t(cxp[b * hidden + h]) + g[0] * g[2 * hidden];
        cyp[b * hidden + h] = scalar_t(tp[b * hidden + h]);
      });
      tanh_cy.tanh_();
      for_each_element(batch, hidden, [&](int64_t b, int64_t h) {
        const acc_t* g = gp + b * 4 * hidden + h;
        hyp[b * hidden + h] = scalar_t(g[3 * hidden] * tp[b * hidden + h]);
        for (int64_t k = 0; k < 4; ++k) {
          wsp[b * 4 * hidden + k * hidden + h] = scalar_t(g[k * hidden]);
        }
      });
    });
  });
  return {hy, cy, workspace};
}
// LITERALINCLUDE END: LSTM_CELL

// The gradients of one LSTM step: of the gate pre-activations (which are the
// gradients of both matmul outputs and, summed over the batch, of each bias)
// and of the previous cell state. Either output gradient may be absent.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const at::Tensor ghy = contiguous_or_undefined(grad_hy), gcy = contiguous_or_undefined(grad_cy);
  if (!ghy.defined() && !gcy.defined()) {
    return {};
  }
  const c10::DeviceIndex device = common_device(ghy, gcy, cx, cy, workspace);
  const at::Tensor c = cx.contiguous(), c_new = cy.contiguous(), ws = workspace.contiguous();
  TORCH_CHECK(c.dim() == 2 && ws.dim() == 2 && ws.size(0) == c.size(0) && ws.size(1) == 4 * c.size(1) &&
                  ws.scalar_type() == c.scalar_type(),
              "_thnn_fused_lstm_cell_backward_impl: expected cx [batch, hidden] and a workspace [batch, 4 * hidden] "
              "of one dtype, got ", c.sizes(), " (", c.scalar_type(), ") and ", ws.sizes(), " (", ws.scalar_type(), ")");
  for (const at::Tensor* t : {&c_new, &ghy, &gcy}) {
    TORCH_CHECK(!t->defined() || (t->sizes() == c.sizes() && t->scalar_type() == c.scalar_type()),
                "_thnn_fused_lstm_cell_backward_impl: expected cy and the output gradients of shape ", c.sizes(),
                " and dtype ", c.scalar_type(), ", got ", t->sizes(), " and ", t->scalar_type());
  }
  at::Tensor grad_gates = at::empty(ws.sizes(), ws.options()), grad_cx = at::empty(c.sizes(), c.options());
  const int64_t batch = c.size(0), hidden = c.size(1);
  run_on(device, [&] {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "_thnn_fused_lstm_cell_backward", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      const scalar_t *ghp = data_or_null<scalar_t>(ghy), *gcp = data_or_null<scalar_t>(gcy);
      const scalar_t *cxp = c.const_data_ptr<scalar_t>(), *cyp = c_new.const_data_ptr<scalar_t>();
      const scalar_t* wsp = ws.const_data_ptr<scalar_t>();
      scalar_t *ggp = grad_gates.mutable_data_ptr<scalar_t>(), *gcxp = grad_cx.mutable_data_ptr<scalar_t>();
      at::Tensor tanh_cy = scratch<acc_t>(batch, hidden);
      acc_t* tp = tanh_cy.mutable_data_ptr<acc_t>();
      for_each_element(batch, hidden, [&](int64_t b, int64_t h) { tp[b * hidden + h] = cyp[b * hidden + h]; });
      tanh_cy.tanh_();
      for_each_element(batch, hidden, [&](int64_t b, int64_t h) {
        const int64_t row = b * 4 * hidden, s = b * hidden + h;
        const acc_t i = wsp[row + h], f = wsp[row + hidden + h], g = wsp[row + 2 * hidden + h],
                    o = wsp[row + 3 * hidden + h];
        const acc_t go = ghp != nullptr ? acc_t(ghp[s]) : acc_t(0);
        const acc_t tanh_c = tp[s];
        const acc_t gc = go * o * (1 - tanh_c * tanh_c) + (gcp != nullptr ? acc_t(gcp[s]) : acc_t(0));
        ggp[row + h] = scalar_t(gc * g * i * (1 - i));
        ggp[row + hidden + h] = scalar_t(gc * acc_t(cxp[s]) * f * (1 - f));
        ggp[row + 2 * hidden + h] = scalar_t(gc * i * (1 - g * g));
        ggp[row + 3 * hidden + h] = scalar_t(go * tanh_c * o * (1 - o));
        gcxp[s] = scalar_t(gc * f);
      });
    });
  });
  return {grad_gates, grad_cx, has_bias ? grad_gates.sum(0) : at::Tensor()};
}

// LITERALINCLUDE START: GRU_CELL
// One GRU step as one kernel: reset and update gates, the new gate (the reset
// gate scales the hidden side's pre-activation, bias included), the new hidden
// state. The workspace keeps the three activations, hx and that hidden side.
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  const c10::DeviceIndex device = common_device(input_gates, hidden_gates, hx, input_bias, hidden_bias);
  const at::Tensor ig = input_gates.contiguous(), hg = hidden_gates.contiguous(), h0 = hx.contiguous();
  const at::Tensor bi = contiguous_or_undefined(input_bias), bh = contiguous_or_undefined(hidden_bias);
  check_cell("_thnn_fused_gru_cell", ig, hg, bi, bh, 3, h0);
  const int64_t batch = h0.size(0), hidden = h0.size(1);
  at::Tensor hy = at::empty(h0.sizes(), h0.options()), workspace = at::empty({batch, 5 * hidden}, h0.options());
  run_on(device, [&] {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, h0.scalar_type(), "_thnn_fused_gru_cell", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      // Columns: reset, update and new gate pre-activations (the new gate's
      // input side first), then the hidden side of the new gate.
      at::Tensor gates = scratch<acc_t>(batch, 4 * hidden);
      const scalar_t *igp = ig.const_data_ptr<scalar_t>(), *hgp = hg.const_data_ptr<scalar_t>();
      const scalar_t *bip = data_or_null<scalar_t>(bi), *bhp = data_or_null<scalar_t>(bh);
      const scalar_t* hxp = h0.const_data_ptr<scalar_t>();
      scalar_t *hyp = hy.mutable_data_ptr<scalar_t>(), *wsp = workspace.mutable_data_ptr<scalar_t>();
      acc_t* gp = gates.mutable_data_ptr<acc_t>();
      auto bias = [](const scalar_t* p, int64_t j) { return p != nullptr ? acc_t(p[j]) : acc_t(0); };
      for_each_element(batch, 3 * hidden, [&](int64_t b, int64_t j) {
        const int64_t k = b * 3 * hidden + j, out = b * 4 * hidden + j;
        if (j < 2 * hidden) {
          gp[out] = acc_t(igp[k]) + acc_t(hgp[k]) + bias(bip, j) + bias(bhp, j);
        } else {
          gp[out] = acc_t(igp[k]) + bias(bip, j);
          gp[out + hidden] = acc_t(hgp[k]) + bias(bhp, j);
        }
      });
      sigmoid_gates(gates, hidden, 0, 2); // reset, update
      for_each_element(batch, hidden, [&](int64_t b, int64_t h) {
        acc_t* g = gp + b * 4 * hidden + h;
        g[2 * hidden] += g[0] * g[3 * hidden];
      });
      tanh_gates(gates, hidden, 2, 1); // new gate
      for_each_element(batch, hidden, [&](int64_t b, int64_t h) {
        const acc_t* g = gp + b * 4 * hidden + h;
        scalar_t* ws = wsp + b * 5 * hidden + h;
        const acc_t update = g[hidden], new_gate = g[2 * hidden], h_prev = hxp[b * hidden + h];
        hyp[b * hidden + h] = scalar_t(new_gate + update * (h_prev - new_gate));
        ws[0] = scalar_t(g[0]);
        ws[hidden] = scalar_t(update);
        ws[2 * hidden] = scalar_t(new_gate);
        ws[3 * hidden] = hxp[b * hidden + h];
        ws[4 * hidden] = scalar_t(g[3 * hidden]);
      });
    });
  });
  return {hy, workspace};
}
// LITERALINCLUDE END: GRU_CELL

// The gradients of one GRU step: of the input-side and hidden-side gate
// pre-activations (they differ only in the new gate, which the reset gate
// scales on the hidden side), of hx, and of the biases (batch sums).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const c10::DeviceIndex device = common_device(grad_hy, workspace);
  const at::Tensor go = grad_hy.contiguous(), ws = workspace.contiguous();
  TORCH_CHECK(go.dim() == 2 && ws.dim() == 2 && ws.size(0) == go.size(0) && ws.size(1) == 5 * go.size(1) &&
                  ws.scalar_type() == go.scalar_type(),
              "_thnn_fused_gru_cell_backward: expected grad_hy [batch, hidden] and a workspace [batch, 5 * hidden] "
              "of one dtype, got ", go.sizes(), " (", go.scalar_type(), ") and ", ws.sizes(), " (", ws.scalar_type(), ")");
  const int64_t batch = go.size(0), hidden = go.size(1);
  at::Tensor grad_input_gates = at::empty({batch, 3 * hidden}, go.options());
  at::Tensor grad_hidden_gates = at::empty({batch, 3 * hidden}, go.options());
  at::Tensor grad_hx = at::empty(go.sizes(), go.options());
  run_on(device, [&] {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, go.scalar_type(), "_thnn_fused_gru_cell_backward", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      const scalar_t *gop = go.const_data_ptr<scalar_t>(), *wsp = ws.const_data_ptr<scalar_t>();
      scalar_t *gip = grad_input_gates.mutable_data_ptr<scalar_t>(), *ghp = grad_hidden_gates.mutable_data_ptr<scalar_t>();
      scalar_t* gxp = grad_hx.mutable_data_ptr<scalar_t>();
      for_each_element(batch, hidden, [&](int64_t b, int64_t h) {
        const int64_t row = b * 3 * hidden, ws_row = b * 5 * hidden;
        const acc_t reset = wsp[ws_row + h], update = wsp[ws_row + hidden + h],
                    new_gate = wsp[ws_row + 2 * hidden + h], h_prev = wsp[ws_row + 3 * hidden + h],
                    hidden_n = wsp[ws_row + 4 * hidden + h];
        const acc_t g = gop[b * hidden + h];
        const acc_t g_update = g * (h_prev - new_gate) * update * (1 - update);
        const acc_t g_new = g * (1 - update) * (1 - new_gate * new_gate);
        const acc_t g_reset = g_new * hidden_n * reset * (1 - reset);
        gip[row + h] = ghp[row + h] = scalar_t(g_reset);
        gip[row + hidden + h] = ghp[row + hidden + h] = scalar_t(g_update);
        gip[row + 2 * hidden + h] = scalar_t(g_new);
        ghp[row + 2 * hidden + h] = scalar_t(g_new * reset);
        gxp[b * hidden + h] = scalar_t(g * update);
      });
    });
  });
  if (!has_bias) {
    return {grad_input_gates, grad_hidden_gates, grad_hx, at::Tensor(), at::Tensor()};
  }
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)};
}

// LITERALINCLUDE START: LSTM_ROUTE
// CPU's condition for oneDNN (ATen's use_mkldnn), on emu tensors: enabled,
// float32 (bfloat16 and float16 where CPU's oneDNN takes them), no
// projections, not empty. Beyond it, the arguments must be well formed (one
// emu device and dtype, the shapes of an LSTM); anything else goes the
// generic way, which reports what is wrong as on any device.
bool supported_by_onednn(at::ScalarType dtype) {
  auto device_check = [](const char* op) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(op, "").typed<bool()>().call();
  };
  static const bool bf16 = device_check("mkldnn::_is_mkldnn_bf16_supported");
  static const bool fp16 = device_check("mkldnn::_is_mkldnn_fp16_supported");
  return dtype == at::kFloat || (dtype == at::kBFloat16 && bf16) ||
      (dtype == at::kHalf && fp16 && !at::GradMode::is_enabled());
}

bool takes_onednn(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
                  int64_t num_layers, bool bidirectional, bool batch_first) {
  if (!at::globalContext().userEnabledMkldnn() || !input.is_privateuseone() || input.dim() != 3 ||
      input.numel() == 0 || !supported_by_onednn(input.scalar_type()) || hx.size() != 2) {
    return false;
  }
  const int64_t directions = bidirectional ? 2 : 1, per_layer = has_biases ? 4 : 2;
  const at::Tensor &h = hx[0], &c = hx[1];
  if (h.dim() != 3 || h.sizes() != c.sizes() || h.size(0) != num_layers * directions ||
      h.size(1) != input.size(batch_first ? 0 : 1) || h.unsafeGetTensorImpl()->has_symbolic_sizes_strides() ||
      static_cast<int64_t>(params.size()) != num_layers * directions * per_layer) {
    return false;
  }
  const int64_t hidden = h.size(2);
  for (const at::TensorList list : {hx, params}) {
    for (const at::Tensor& t : list) {
      if (t.device() != input.device() || t.scalar_type() != input.scalar_type()) {
        return false;
      }
    }
  }
  for (int64_t layer = 0; layer < num_layers * directions; ++layer) {
    const int64_t layer_input = layer < directions ? input.size(2) : hidden * directions;
    const at::Tensor* w = &params[layer * per_layer];
    if (w[0].sizes() != at::IntArrayRef{4 * hidden, layer_input} || w[1].sizes() != at::IntArrayRef{4 * hidden, hidden} ||
        (has_biases && (w[2].sizes() != at::IntArrayRef{4 * hidden} || w[3].sizes() != at::IntArrayRef{4 * hidden}))) {
      return false;
    }
  }
  return true;
}

// aten::lstm.input on emu. PyTorch's oneDNN driver for it (the CPU kernel of
// lstm_mkldnn_stub) is device-generic: it loops over layers and directions
// calling aten::mkldnn_rnn_layer, dropout and cat through the dispatcher. Given
// emu tensors, autograd records those ops (mkldnn_rnn_layer has a derivative,
// mkldnn_rnn_layer_backward) and each runs CPU's kernel on device memory.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(const at::Tensor& input, at::TensorList hx,
                                                    at::TensorList params, bool has_biases, int64_t num_layers,
                                                    double dropout, bool train, bool bidirectional,
                                                    bool batch_first) {
  if (!takes_onednn(input, hx, params, has_biases, num_layers, bidirectional, batch_first)) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  }
  at::Tensor output, hy, cy;
  at::native::lstm_mkldnn_stub(c10::DeviceType::CPU, output, hy, cy, input, hx, params, has_biases, num_layers,
                               dropout, train, bidirectional, batch_first);
  return {output, hy, cy};
}
// LITERALINCLUDE END: LSTM_ROUTE

} // namespace

// LITERALINCLUDE START: RECURRENT_REGISTER
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
  m.impl("lstm.input", TORCH_FN(lstm));
}

// aten::lstm is composite (CompositeImplicitAutograd): its kernel is made of
// differentiable ops. A backend kernel for it replaces the composite one at
// the autograd key too, so it is registered there, where autograd records the
// ops it calls; the PrivateUse1 one serves inference mode.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(lstm));
}

// Autocast runs the whole-sequence LSTM in the lower precision dtype, as CUDA
// does with its cuDNN RNN op. Cast at the entry, the route follows the dtype:
// bfloat16 takes oneDNN (computing what CPU's autocast, which casts each
// oneDNN layer, computes); float16, which CPU's oneDNN cannot train, steps
// through the fused cells.
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  KERNEL_PRIVATEUSEONE(lstm, input, lower_precision_fp)
}
// LITERALINCLUDE END: RECURRENT_REGISTER

} // namespace torch_emu
