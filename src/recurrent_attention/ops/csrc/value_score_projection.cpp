// Aaren's values-and-scores projection (models.aaren.AarenAttention.value_score_projection) as
// one C++ autograd function. The query is a parameter, so the scores need no keys: with the fused
// q/k/v weight W (rows: W_q, W_k, W_v) and bias b, per head h,
//   q = W_q query + b_q,   S[h] = c W_k[h]^T q[h],   s_b[h] = c b_k[h]·q[h],   c = 1 / sqrt(d_head),
// W_k[h] being the head's d_head rows of W_k. The result is one (d + H, d_in) weight, rows W_v
// then S, and its bias (b_v, s_b): values and scores of tokens x are then one matrix product,
// x F^T + f, forward and backward. In PyTorch ops building F is a dozen autograd nodes on
// d_model-sized tensors (and a cat); here it is one loop each way, and the backward writes the
// gradient of the whole fused weight at once.
#include "native.h"

#include <algorithm>
#include <cmath>

namespace recurrent_attention {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool present(const Tensor& t) { return t.numel() > 0; }

struct ValueScoreProjection : public torch::autograd::Function<ValueScoreProjection> {
  // An absent bias comes as an empty tensor (Function::apply takes no undefined ones).
  static variable_list forward(AutogradContext* ctx, const Tensor& query, const Tensor& qkv_weight,
                               const Tensor& qkv_bias, int64_t n_heads) {
    const Tensor x = query.contiguous(), w = qkv_weight.contiguous(), b = qkv_bias.contiguous();
    const int64_t d_in = w.size(1), d = w.size(0) / 3, d_head = d / n_heads;
    Tensor q = torch::empty({d}, x.options());
    Tensor weight = torch::empty({d + n_heads, d_in}, x.options());
    Tensor bias = present(b) ? torch::empty({d + n_heads}, x.options()) : torch::empty({0}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "value_score_projection_forward", [&] {
      const scalar_t scale = 1 / std::sqrt(static_cast<scalar_t>(d_head));
      const scalar_t *xp = x.data_ptr<scalar_t>(), *wp = w.data_ptr<scalar_t>();
      const scalar_t *wk = wp + d * d_in, *wv = wp + 2 * d * d_in;
      const scalar_t* bp = present(b) ? b.data_ptr<scalar_t>() : nullptr;
      scalar_t *qp = q.data_ptr<scalar_t>(), *fp = weight.data_ptr<scalar_t>();
      for (int64_t o = 0; o < d; ++o) {
        scalar_t sum = bp ? bp[o] : scalar_t(0);
        for (int64_t i = 0; i < d_in; ++i) sum += wp[o * d_in + i] * xp[i];
        qp[o] = sum * scale;  // scaled once here: every use below wants c q
      }
      std::copy(wv, wv + d * d_in, fp);
      scalar_t* scores = fp + d * d_in;
      std::fill(scores, scores + n_heads * d_in, scalar_t(0));
      for (int64_t o = 0; o < d; ++o) {
        scalar_t* row = scores + (o / d_head) * d_in;
        for (int64_t i = 0; i < d_in; ++i) row[i] += wk[o * d_in + i] * qp[o];
      }
      if (bp) {
        scalar_t* fb = bias.data_ptr<scalar_t>();
        std::copy(bp + 2 * d, bp + 3 * d, fb);
        std::fill(fb + d, fb + d + n_heads, scalar_t(0));
        for (int64_t o = 0; o < d; ++o) fb[d + o / d_head] += bp[d + o] * qp[o];
      }
    });
    ctx->save_for_backward({x, w, b, q});
    ctx->saved_data["n_heads"] = n_heads;
    ctx->set_materialize_grads(false);
    return {weight, bias};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "the native value-score projection is differentiable once (no create_graph)");
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1], &b = saved[2], &q = saved[3];
    const int64_t n_heads = ctx->saved_data["n_heads"].toInt();
    const Tensor grad_weight = grads[0].defined() ? grads[0].contiguous() : grads[0];
    const Tensor grad_bias = grads[1].defined() && grads[1].numel() > 0 ? grads[1].contiguous() : Tensor();
    const int64_t d_in = w.size(1), d = w.size(0) / 3, d_head = d / n_heads;
    // grad_q holds dL/d(c q); dL/dq is c times it
    Tensor grad_q = torch::zeros({d}, q.options());
    Tensor grad_qkv_weight = torch::zeros_like(w);
    Tensor grad_qkv_bias = present(b) ? torch::zeros_like(b) : Tensor();
    Tensor grad_query = torch::zeros_like(x);
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "value_score_projection_backward", [&] {
      const scalar_t scale = 1 / std::sqrt(static_cast<scalar_t>(d_head));
      const scalar_t *qp = q.data_ptr<scalar_t>(), *xp = x.data_ptr<scalar_t>(), *wp = w.data_ptr<scalar_t>();
      const scalar_t* wk = wp + d * d_in;
      scalar_t *gq = grad_q.data_ptr<scalar_t>(), *gw = grad_qkv_weight.data_ptr<scalar_t>();
      scalar_t *gwk = gw + d * d_in, *gwv = gw + 2 * d * d_in;
      if (grad_weight.defined()) {
        const scalar_t* gf = grad_weight.data_ptr<scalar_t>();
        std::copy(gf, gf + d * d_in, gwv);
        const scalar_t* grad_scores = gf + d * d_in;
        for (int64_t o = 0; o < d; ++o) {
          const scalar_t* row = grad_scores + (o / d_head) * d_in;
          scalar_t sum = 0;
          for (int64_t i = 0; i < d_in; ++i) {
            sum += wk[o * d_in + i] * row[i];
            gwk[o * d_in + i] = qp[o] * row[i];
          }
          gq[o] = sum;
        }
      }
      if (grad_bias.defined() && present(b)) {
        const scalar_t *gfb = grad_bias.data_ptr<scalar_t>(), *bp = b.data_ptr<scalar_t>();
        scalar_t* gb = grad_qkv_bias.data_ptr<scalar_t>();
        std::copy(gfb, gfb + d, gb + 2 * d);
        for (int64_t o = 0; o < d; ++o) {
          const scalar_t g = gfb[d + o / d_head];
          gq[o] += bp[d + o] * g;
          gb[d + o] = qp[o] * g;
        }
      }
      scalar_t *gx = grad_query.data_ptr<scalar_t>(), *gbq = present(b) ? grad_qkv_bias.data_ptr<scalar_t>() : nullptr;
      for (int64_t o = 0; o < d; ++o) {
        const scalar_t g = gq[o] * scale;
        if (gbq) gbq[o] = g;
        for (int64_t i = 0; i < d_in; ++i) {
          gx[i] += wp[o * d_in + i] * g;
          gw[o * d_in + i] = g * xp[i];
        }
      }
    });
    return {grad_query, grad_qkv_weight, grad_qkv_bias, Tensor()};
  }
};

}  // namespace

std::tuple<Tensor, std::optional<Tensor>> value_score_projection(const Tensor& query, const Tensor& qkv_weight,
                                                                 const std::optional<Tensor>& qkv_bias,
                                                                 int64_t n_heads) {
  TORCH_CHECK(query.device().is_cpu() && qkv_weight.device().is_cpu(), "CPU tensors only");
  TORCH_CHECK(query.dim() == 1 && qkv_weight.dim() == 2, "a query vector and a 2-d q/k/v weight");
  TORCH_CHECK(qkv_weight.size(1) == query.size(0) && qkv_weight.size(0) % 3 == 0,
              "the q/k/v weight must be (3 d, d_model) for a query of d_model");
  TORCH_CHECK(n_heads > 0 && (qkv_weight.size(0) / 3) % n_heads == 0, "n_heads must divide the projection width");
  TORCH_CHECK(!qkv_bias.has_value() || qkv_bias->numel() == qkv_weight.size(0),
              "the q/k/v bias must have one entry per row of the weight");
  const Tensor none = torch::empty({0}, query.options());
  auto result = ValueScoreProjection::apply(query, qkv_weight, qkv_bias.value_or(none), n_heads);
  std::optional<Tensor> bias;
  if (qkv_bias.has_value()) bias = result[1];
  return {result[0], bias};
}

}  // namespace recurrent_attention
