// Aaren's eval step for one token (models.aaren: LayerStack's lean path with AarenAttention's
// lean_mixer) as one C++ call. At batch 1 the Python form is ~25 small ops per layer whose
// dispatch, not arithmetic, is the time; here the matrix products and layer norms are ATen calls
// from C++ and the (m, u, w) update of every head is one loop. Weights are laid out once by the
// Python side (transposed for addmm, biases never absent) and held by an AarenStepper.
#include "native.h"

#include <algorithm>
#include <cmath>

namespace recurrent_attention {
namespace {

using torch::Tensor;

constexpr int64_t kWeightsPerBlock = 12;

// The (m, u, w) update for one token, finite scores (attention_step with finite_scores=True):
// m' = max(m, s); u' = u e^(m-m') + e^(s-m'); w' = w e^(m-m') + v e^(s-m'); out = w' / u'.
template <typename scalar_t>
void update_state(const scalar_t* scores, const scalar_t* values, int64_t row_stride, const scalar_t* m,
                  const scalar_t* u, const scalar_t* w, scalar_t* m_out, scalar_t* u_out, scalar_t* w_out,
                  scalar_t* out, int64_t batch, int64_t heads, int64_t d_head) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i = b * heads + h;
      const scalar_t s = scores[b * row_stride + h];
      const scalar_t top = std::max(m[i], s);
      const scalar_t old_scale = std::exp(m[i] - top), new_scale = std::exp(s - top);
      const scalar_t total = u[i] * old_scale + new_scale;
      m_out[i] = top;
      u_out[i] = total;
      const scalar_t* v = values + b * row_stride + h * d_head;
      for (int64_t k = 0; k < d_head; ++k) {
        const scalar_t weighted = w[i * d_head + k] * old_scale + v[k] * new_scale;
        w_out[i * d_head + k] = weighted;
        out[i * d_head + k] = weighted / total;
      }
    }
  }
}

}  // namespace

AarenStepper::AarenStepper(std::vector<Tensor> weights, std::vector<double> eps, bool norm_first,
                           bool gelu, std::optional<Tensor> final_weight, std::optional<Tensor> final_bias,
                           double final_eps, int64_t heads, int64_t d_head, std::vector<Tensor> sources)
    : weights_(std::move(weights)),
      eps_(std::move(eps)),
      norm_first_(norm_first),
      gelu_(gelu),
      final_weight_(std::move(final_weight)),
      final_bias_(std::move(final_bias)),
      final_eps_(final_eps),
      heads_(heads),
      d_head_(d_head),
      sources_(std::move(sources)) {
  TORCH_CHECK(weights_.size() % kWeightsPerBlock == 0 && eps_.size() * 6 == weights_.size(),
              "AarenStepper: 12 weights and 2 epsilons per block");
  versions_.reserve(sources_.size());
  for (const Tensor& source : sources_) versions_.push_back(source._version());
}

std::optional<std::tuple<Tensor, std::vector<Tensor>>> AarenStepper::try_step(
    const Tensor& token, const std::vector<Tensor>& state) const {
  const auto dtype = weights_.front().scalar_type();
  if (at::GradMode::is_enabled() || !token.device().is_cpu() || token.dim() != 2 || token.scalar_type() != dtype)
    return std::nullopt;
  for (const Tensor& part : state)
    if (!part.device().is_cpu() || part.scalar_type() != dtype) return std::nullopt;
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i]._version() != versions_[i]) return std::nullopt;
  return step(token, state);
}

std::tuple<Tensor, std::vector<Tensor>> AarenStepper::step(const Tensor& token,
                                                           const std::vector<Tensor>& state) const {
  const int64_t blocks = static_cast<int64_t>(weights_.size()) / kWeightsPerBlock;
  TORCH_CHECK(static_cast<int64_t>(state.size()) == 3 * blocks, "AarenStepper.step: (m, u, w) per block");
  TORCH_CHECK(token.dim() == 2, "AarenStepper.step: a token is (batch, d_model)");
  // The step runs without gradients: below autograd's dispatch keys each ATen call goes straight to
  // its CPU kernel, which at batch 1 is a good part of the cost of ~20 small calls.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const int64_t batch = token.size(0), d_model = heads_ * d_head_;
  const std::vector<int64_t> shape{d_model};
  std::vector<Tensor> new_state;
  new_state.reserve(state.size());
  Tensor x = token;
  for (int64_t block = 0; block < blocks; ++block) {
    const Tensor* w = weights_.data() + block * kWeightsPerBlock;
    // mix_w, mix_b, out_w, out_b, ff_in_w, ff_in_b, ff_out_w, ff_out_b, norm_mix_w, norm_mix_b, norm_ff_w, norm_ff_b
    const double eps_mix = eps_[2 * block], eps_ff = eps_[2 * block + 1];
    const Tensor h = norm_first_ ? at::layer_norm(x, shape, w[8], w[9], eps_mix) : x;
    const Tensor projected = at::addmm(w[1], h, w[0]);  // (B, d_model + H): values, then scores
    const Tensor m = state[3 * block].contiguous(), u = state[3 * block + 1].contiguous();
    const Tensor ws = state[3 * block + 2].contiguous();
    TORCH_CHECK(m.scalar_type() == projected.scalar_type(), "AarenStepper.step: state and weights of one dtype");
    Tensor m_out = at::empty_like(m), u_out = at::empty_like(u), w_out = at::empty_like(ws);
    Tensor out = at::empty({batch, d_model}, projected.options());
    AT_DISPATCH_FLOATING_TYPES(projected.scalar_type(), "aaren_step_update", [&] {
      const scalar_t* p = projected.data_ptr<scalar_t>();
      update_state<scalar_t>(p + d_model, p, d_model + heads_, m.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(),
                             ws.data_ptr<scalar_t>(), m_out.data_ptr<scalar_t>(), u_out.data_ptr<scalar_t>(),
                             w_out.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), batch, heads_, d_head_);
    });
    new_state.push_back(m_out);
    new_state.push_back(u_out);
    new_state.push_back(w_out);
    Tensor mixed = at::addmm(w[3], out, w[2]);
    if (norm_first_) {
      x = x + mixed;
      Tensor hidden = at::addmm(w[5], at::layer_norm(x, shape, w[10], w[11], eps_ff), w[4]);
      hidden = gelu_ ? at::gelu(hidden) : at::relu(hidden);
      x = at::addmm(w[7], hidden, w[6]).add_(x);
    } else {
      x = at::layer_norm(mixed.add_(x), shape, w[8], w[9], eps_mix);
      Tensor hidden = at::addmm(w[5], x, w[4]);
      hidden = gelu_ ? at::gelu(hidden) : at::relu(hidden);
      x = at::layer_norm(at::addmm(w[7], hidden, w[6]).add_(x), shape, w[10], w[11], eps_ff);
    }
  }
  if (final_weight_.has_value()) x = at::layer_norm(x, shape, *final_weight_, *final_bias_, final_eps_);
  return {x, new_state};
}

}  // namespace recurrent_attention
