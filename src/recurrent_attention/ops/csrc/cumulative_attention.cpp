// The cumulative prefix-attention kernel (prefix_attention._ChunkCumulativeAttention) as one C++
// autograd function. At a few tokens per sequence (event forecasting: ~6) the PyTorch kernel's cost
// is two dozen small ops and their dispatch, not arithmetic; here the forward and the backward are
// one loop over the rows each. Same formulas, same reference r (the first score, or the carry's m if
// larger), same late-row rule: from the first score more than `limit` above r (or NaN) on, a row is
// late, its token weighs 0, and the caller replaces it with the prefix-max kernel's row.
#include "native.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace recurrent_attention {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// torch.maximum's rule: NaN if either is.
template <typename T>
T nan_max(T a, T b) {
  return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
}

// The carry of one row, or none (every pointer null).
template <typename T>
struct Carry {
  const T* m = nullptr;
  const T* u = nullptr;
  const T* w = nullptr;
};

template <typename T>
T reference_of(const T* s, const Carry<T>& carry) {
  return carry.m != nullptr ? nan_max(s[0], *carry.m) : s[0];
}

template <typename T>
bool has_late_row(const T* s, const Carry<T>& carry, int64_t n, T limit) {
  const T reference = reference_of(s, carry);
  for (int64_t k = 0; k < n; ++k) {
    if (!(s[k] - reference <= limit)) return true;
  }
  return false;
}

// Row outputs of the forward, each pointing at this row's part of its tensor.
template <typename T>
struct RowOutputs {
  T* e;            // (n): exp(s - r), 0 for late tokens
  T* denominator;  // (n): cumulative sums of e plus the carry's, at least the smallest float
  T* out;          // (n, d)
  T* top;          // the final state's m: the largest score (or the carry's m)
  T* final_u;
  T* final_w;      // (d)
  T* carried;      // exp(m_carry - r), or null without a carry
  T* rescale;      // exp(r - top), 0 when the last row is late
  bool* late;      // (n), or null when no row of the call is late
};

template <typename T>
void forward_row(const T* s, const T* v, const Carry<T>& carry, int64_t n, int64_t d, T limit,
                 const RowOutputs<T>& row, T* numerator) {
  const T reference = reference_of(s, carry);
  T top = s[0];
  for (int64_t k = 1; k < n; ++k) top = nan_max(top, s[k]);
  T sum = 0;
  std::fill(numerator, numerator + d, T(0));
  if (carry.m != nullptr) {
    top = nan_max(top, *carry.m);
    const T carried = std::exp(*carry.m - std::max(reference, std::numeric_limits<T>::lowest()));
    *row.carried = carried;
    sum = carried * *carry.u;
    for (int64_t j = 0; j < d; ++j) numerator[j] = carried * carry.w[j];
  }
  bool late = false;
  for (int64_t k = 0; k < n; ++k) {
    const T shifted = s[k] - reference;
    late = late || !(shifted <= limit);
    if (row.late != nullptr) row.late[k] = late;
    const T weight = late ? T(0) : std::exp(shifted);
    row.e[k] = weight;
    sum += weight;
    // Only a row with nothing in it (all late, no carry) has a sum below 1: it reads out 0.
    const T denominator = std::max(sum, std::numeric_limits<T>::min());
    row.denominator[k] = denominator;
    for (int64_t j = 0; j < d; ++j) {
      numerator[j] += weight * v[k * d + j];
      row.out[k * d + j] = numerator[j] / denominator;
    }
  }
  const T rescale = late ? T(0) : std::exp(reference - top);
  *row.top = top;
  *row.rescale = rescale;
  *row.final_u = row.denominator[n - 1] * rescale;
  for (int64_t j = 0; j < d; ++j) row.final_w[j] = numerator[j] * rescale;
}

// Gradients of one row: two reversed cumulative sums, N_i of dL/dn and D_i of dL/dd, give
// dv_i = e_i N_i, ds_i = e_i (v_i·N_i + D_i); the carry gets dw = b N_1, du = b D_1.
template <typename T>
void backward_row(const T* e, const T* v, const T* denominator, const T* out, const T* grad_out,
                  const T* grad_u, const T* grad_w, T rescale, int64_t n, int64_t d, T* grad_s, T* grad_v,
                  T* later_numerator, T* gradient, T* minus_later_denominator) {
  std::fill(later_numerator, later_numerator + d, T(0));
  T minus_later = 0;
  for (int64_t k = n - 1; k >= 0; --k) {
    T minus_grad_denominator = 0;  // g_k·o_k / d_k
    for (int64_t j = 0; j < d; ++j) {
      gradient[j] = grad_out != nullptr ? grad_out[k * d + j] / denominator[k] : T(0);
      minus_grad_denominator += gradient[j] * out[k * d + j];
    }
    if (k == n - 1) {  // the final state is the last row rescaled
      if (grad_w != nullptr) {
        for (int64_t j = 0; j < d; ++j) gradient[j] += rescale * grad_w[j];
      }
      if (grad_u != nullptr) minus_grad_denominator -= rescale * *grad_u;
    }
    minus_later += minus_grad_denominator;
    T value_dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      later_numerator[j] += gradient[j];
      value_dot += v[k * d + j] * later_numerator[j];
      grad_v[k * d + j] = e[k] * later_numerator[j];
    }
    grad_s[k] = e[k] * (value_dot - minus_later);
  }
  *minus_later_denominator = minus_later;
}

// Rows are independent: at::parallel_for splits them over torch's intra-op threads, each task
// getting enough rows (~32k values) that threads pay off; a small call runs on the calling thread.
int64_t rows_per_task(int64_t n, int64_t d) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * d)); }

template <typename T>
T* row_or_null(const Tensor& t, int64_t offset) {
  return t.defined() && t.numel() > 0 ? t.data_ptr<T>() + offset : nullptr;
}

struct CumulativeAttention : public torch::autograd::Function<CumulativeAttention> {
  // An absent carry comes as three empty tensors (Function::apply takes no undefined ones).
  static variable_list forward(AutogradContext* ctx, const Tensor& scores, const Tensor& values,
                               const Tensor& carry_m, const Tensor& carry_u, const Tensor& carry_w,
                               double limit) {
    const Tensor s = scores.contiguous(), v = values.contiguous();
    const bool has_carry = carry_m.numel() > 0;
    const Tensor cm = carry_m.contiguous(), cu = carry_u.contiguous(), cw = carry_w.contiguous();
    const int64_t n = s.size(-1), d = v.size(-1), rows = s.numel() / n;
    const auto batch = s.sizes().slice(0, s.dim() - 1).vec();
    auto batch_d = batch;
    batch_d.push_back(d);
    const auto options = s.options();
    Tensor e = torch::empty_like(s), denominator = torch::empty_like(s), out = torch::empty_like(v);
    Tensor top = torch::empty(batch, options), final_u = torch::empty(batch, options);
    Tensor final_w = torch::empty(batch_d, options), rescale = torch::empty(batch, options);
    Tensor carried = has_carry ? torch::empty(batch, options) : torch::empty({0}, options);
    Tensor late = torch::empty({0}, options.dtype(torch::kBool));
    AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "cumulative_attention_forward", [&] {
      const scalar_t* sp = s.data_ptr<scalar_t>();
      const scalar_t* vp = v.data_ptr<scalar_t>();
      auto carry_of = [&](int64_t r) {
        return has_carry ? Carry<scalar_t>{cm.data_ptr<scalar_t>() + r, cu.data_ptr<scalar_t>() + r,
                                           cw.data_ptr<scalar_t>() + r * d}
                         : Carry<scalar_t>{};
      };
      const auto lim = static_cast<scalar_t>(limit);
      bool any_late = false;
      for (int64_t r = 0; r < rows && !any_late; ++r) any_late = has_late_row(sp + r * n, carry_of(r), n, lim);
      if (any_late) late = torch::empty(s.sizes(), options.dtype(torch::kBool));
      at::parallel_for(0, rows, rows_per_task(n, d), [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> numerator(d);
        for (int64_t r = begin; r < end; ++r) {
          const RowOutputs<scalar_t> row{e.data_ptr<scalar_t>() + r * n,
                                         denominator.data_ptr<scalar_t>() + r * n,
                                         out.data_ptr<scalar_t>() + r * n * d,
                                         top.data_ptr<scalar_t>() + r,
                                         final_u.data_ptr<scalar_t>() + r,
                                         final_w.data_ptr<scalar_t>() + r * d,
                                         row_or_null<scalar_t>(carried, r),
                                         rescale.data_ptr<scalar_t>() + r,
                                         any_late ? late.data_ptr<bool>() + r * n : nullptr};
          forward_row(sp + r * n, vp + r * n * d, carry_of(r), n, d, lim, row, numerator.data());
        }
      });
    });
    ctx->save_for_backward({e, v, denominator, out, carried, rescale});
    ctx->mark_non_differentiable({top, late});
    ctx->set_materialize_grads(false);
    return {out, top, final_u, final_w, late};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "the native cumulative attention kernel is differentiable once (no create_graph)");
    const auto saved = ctx->get_saved_variables();
    const Tensor &e = saved[0], &v = saved[1], &denominator = saved[2], &out = saved[3];
    const Tensor &carried = saved[4], &rescale = saved[5];
    auto contiguous = [](const Tensor& t) { return t.defined() ? t.contiguous() : t; };
    const Tensor grad_out = contiguous(grads[0]), grad_u = contiguous(grads[2]), grad_w = contiguous(grads[3]);
    const int64_t n = e.size(-1), d = v.size(-1), rows = e.numel() / n;
    const bool has_carry = carried.numel() > 0;
    Tensor grad_s = torch::empty_like(e), grad_v = torch::empty_like(v);
    Tensor grad_carry_u, grad_carry_w;
    if (has_carry) {
      auto shape = carried.sizes().vec();
      grad_carry_u = torch::empty(shape, carried.options());
      shape.push_back(d);
      grad_carry_w = torch::empty(shape, carried.options());
    }
    AT_DISPATCH_FLOATING_TYPES(e.scalar_type(), "cumulative_attention_backward", [&] {
      at::parallel_for(0, rows, rows_per_task(n, d), [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> later_numerator(d), gradient(d);
        for (int64_t r = begin; r < end; ++r) {
          scalar_t minus_later_denominator;
          backward_row(e.data_ptr<scalar_t>() + r * n, v.data_ptr<scalar_t>() + r * n * d,
                       denominator.data_ptr<scalar_t>() + r * n, out.data_ptr<scalar_t>() + r * n * d,
                       row_or_null<scalar_t>(grad_out, r * n * d), row_or_null<scalar_t>(grad_u, r),
                       row_or_null<scalar_t>(grad_w, r * d), rescale.data_ptr<scalar_t>()[r], n, d,
                       grad_s.data_ptr<scalar_t>() + r * n, grad_v.data_ptr<scalar_t>() + r * n * d,
                       later_numerator.data(), gradient.data(), &minus_later_denominator);
          if (has_carry) {
            const scalar_t c = carried.data_ptr<scalar_t>()[r];
            scalar_t* grad_w_row = grad_carry_w.data_ptr<scalar_t>() + r * d;
            for (int64_t j = 0; j < d; ++j) grad_w_row[j] = c * later_numerator[j];
            grad_carry_u.data_ptr<scalar_t>()[r] = -c * minus_later_denominator;
          }
        }
      });
    });
    return {grad_s, grad_v, Tensor(), grad_carry_u, grad_carry_w, Tensor()};
  }
};

}  // namespace

std::tuple<Tensor, Tensor, Tensor, Tensor, std::optional<Tensor>> cumulative_attention(
    const Tensor& scores, const Tensor& values, const std::optional<Tensor>& carry_m,
    const std::optional<Tensor>& carry_u, const std::optional<Tensor>& carry_w, double limit) {
  TORCH_CHECK(scores.device().is_cpu() && values.device().is_cpu(), "CPU tensors only");
  TORCH_CHECK(scores.dim() >= 1 && values.dim() == scores.dim() + 1, "scores (..., N) and values (..., N, D)");
  TORCH_CHECK(values.sizes().slice(0, scores.dim()) == scores.sizes(), "scores and values disagree in shape");
  TORCH_CHECK(scores.size(-1) > 0, "at least one token");
  TORCH_CHECK(scores.scalar_type() == values.scalar_type(), "scores and values of one dtype");
  TORCH_CHECK(carry_m.has_value() == carry_u.has_value() && carry_u.has_value() == carry_w.has_value(),
              "a carry is m, u and w, or none");
  const Tensor none = torch::empty({0}, scores.options());
  auto result = CumulativeAttention::apply(scores, values, carry_m.value_or(none), carry_u.value_or(none),
                                           carry_w.value_or(none), limit);
  std::optional<Tensor> late;
  if (result[4].numel() > 0) late = result[4];
  return {result[0], result[1], result[2], result[3], late};
}

}  // namespace recurrent_attention
