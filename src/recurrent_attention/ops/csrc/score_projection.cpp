// Aaren's score projection (models.aaren.AarenAttention.score_projection) as one C++ autograd
// function. The query is a parameter, so the scores are x @ A + b with, per head h,
//   q = W_q query + b_q,   A[:, h] = c W_k[h]^T q[h],   b[h] = c b_k[h]·q[h],   c = 1 / sqrt(d_head),
// W_k[h] being the head's d_head rows of W_k. In PyTorch ops that is a dozen autograd nodes on
// d_model-sized tensors (~115 µs fwd+bwd at d_model 64 on CPU, the whole score path of a layer);
// here it is one loop each way.
#include "native.h"

#include <algorithm>
#include <cmath>

namespace recurrent_attention {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool present(const Tensor& t) { return t.numel() > 0; }

struct ScoreProjection : public torch::autograd::Function<ScoreProjection> {
  // Absent biases come as empty tensors (Function::apply takes no undefined ones).
  static variable_list forward(AutogradContext* ctx, const Tensor& query, const Tensor& query_weight,
                               const Tensor& query_bias, const Tensor& key_weight, const Tensor& key_bias,
                               int64_t n_heads) {
    const Tensor x = query.contiguous(), wq = query_weight.contiguous(), bq = query_bias.contiguous();
    const Tensor wk = key_weight.contiguous(), bk = key_bias.contiguous();
    const int64_t d_model = wk.size(1), d_out = wk.size(0), d_head = d_out / n_heads;
    Tensor q = torch::empty({d_out}, x.options());
    Tensor matrix = torch::empty({d_model, n_heads}, x.options());
    Tensor bias = present(bk) ? torch::empty({n_heads}, x.options()) : torch::empty({0}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "score_projection_forward", [&] {
      const scalar_t scale = 1 / std::sqrt(static_cast<scalar_t>(d_head));
      const scalar_t *xp = x.data_ptr<scalar_t>(), *wqp = wq.data_ptr<scalar_t>(), *wkp = wk.data_ptr<scalar_t>();
      scalar_t *qp = q.data_ptr<scalar_t>(), *mp = matrix.data_ptr<scalar_t>();
      for (int64_t o = 0; o < d_out; ++o) {
        scalar_t sum = present(bq) ? bq.data_ptr<scalar_t>()[o] : scalar_t(0);
        for (int64_t i = 0; i < wq.size(1); ++i) sum += wqp[o * wq.size(1) + i] * xp[i];
        qp[o] = sum;
      }
      std::fill(mp, mp + d_model * n_heads, scalar_t(0));
      for (int64_t o = 0; o < d_out; ++o) {
        const int64_t h = o / d_head;
        for (int64_t i = 0; i < d_model; ++i) mp[i * n_heads + h] += wkp[o * d_model + i] * qp[o];
      }
      for (int64_t k = 0; k < d_model * n_heads; ++k) mp[k] *= scale;
      if (present(bk)) {
        scalar_t* bp = bias.data_ptr<scalar_t>();
        const scalar_t* bkp = bk.data_ptr<scalar_t>();
        for (int64_t h = 0; h < n_heads; ++h) {
          scalar_t sum = 0;
          for (int64_t j = 0; j < d_head; ++j) sum += bkp[h * d_head + j] * qp[h * d_head + j];
          bp[h] = sum * scale;
        }
      }
    });
    ctx->save_for_backward({x, wq, wk, bk, q});
    ctx->saved_data["query_bias"] = present(bq);
    ctx->saved_data["n_heads"] = n_heads;
    ctx->set_materialize_grads(false);
    return {matrix, bias};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "the native score projection is differentiable once (no create_graph)");
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &wq = saved[1], &wk = saved[2], &bk = saved[3], &q = saved[4];
    const bool has_query_bias = ctx->saved_data["query_bias"].toBool();
    const int64_t n_heads = ctx->saved_data["n_heads"].toInt();
    const Tensor grad_matrix = grads[0].defined() ? grads[0].contiguous() : grads[0];
    const Tensor grad_bias = grads[1].defined() && grads[1].numel() > 0 ? grads[1].contiguous() : Tensor();
    const int64_t d_model = wk.size(1), d_out = wk.size(0), d_in = wq.size(1), d_head = d_out / n_heads;
    Tensor grad_q = torch::zeros({d_out}, q.options());
    Tensor grad_key_weight = torch::zeros_like(wk);
    Tensor grad_key_bias = present(bk) ? torch::zeros_like(bk) : Tensor();
    Tensor grad_query = torch::empty_like(x), grad_query_weight = torch::empty_like(wq);
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "score_projection_backward", [&] {
      const scalar_t scale = 1 / std::sqrt(static_cast<scalar_t>(d_head));
      const scalar_t *qp = q.data_ptr<scalar_t>(), *wkp = wk.data_ptr<scalar_t>();
      scalar_t* gq = grad_q.data_ptr<scalar_t>();
      if (grad_matrix.defined()) {
        const scalar_t* gm = grad_matrix.data_ptr<scalar_t>();
        scalar_t* gwk = grad_key_weight.data_ptr<scalar_t>();
        for (int64_t o = 0; o < d_out; ++o) {
          const int64_t h = o / d_head;
          scalar_t sum = 0;
          for (int64_t i = 0; i < d_model; ++i) {
            const scalar_t g = gm[i * n_heads + h] * scale;
            sum += wkp[o * d_model + i] * g;
            gwk[o * d_model + i] = qp[o] * g;
          }
          gq[o] = sum;
        }
      }
      if (grad_bias.defined() && present(bk)) {
        const scalar_t *gb = grad_bias.data_ptr<scalar_t>(), *bkp = bk.data_ptr<scalar_t>();
        scalar_t* gbk = grad_key_bias.data_ptr<scalar_t>();
        for (int64_t o = 0; o < d_out; ++o) {
          const scalar_t g = gb[o / d_head] * scale;
          gq[o] += bkp[o] * g;
          gbk[o] = qp[o] * g;
        }
      }
      const scalar_t *xp = x.data_ptr<scalar_t>(), *wqp = wq.data_ptr<scalar_t>();
      scalar_t *gx = grad_query.data_ptr<scalar_t>(), *gwq = grad_query_weight.data_ptr<scalar_t>();
      std::fill(gx, gx + d_in, scalar_t(0));
      for (int64_t o = 0; o < d_out; ++o) {
        for (int64_t i = 0; i < d_in; ++i) {
          gx[i] += wqp[o * d_in + i] * gq[o];
          gwq[o * d_in + i] = gq[o] * xp[i];
        }
      }
    });
    return {grad_query, grad_query_weight, has_query_bias ? grad_q : Tensor(), grad_key_weight, grad_key_bias,
            Tensor()};
  }
};

}  // namespace

std::tuple<Tensor, std::optional<Tensor>> score_projection(const Tensor& query, const Tensor& query_weight,
                                                           const std::optional<Tensor>& query_bias,
                                                           const Tensor& key_weight,
                                                           const std::optional<Tensor>& key_bias,
                                                           int64_t n_heads) {
  TORCH_CHECK(query.device().is_cpu() && query_weight.device().is_cpu() && key_weight.device().is_cpu(),
              "CPU tensors only");
  TORCH_CHECK(query.dim() == 1 && query_weight.dim() == 2 && key_weight.dim() == 2, "a query vector, 2-d weights");
  TORCH_CHECK(query_weight.size(1) == query.size(0) && query_weight.size(0) == key_weight.size(0),
              "query (d_model), W_q (d, d_model) and W_k (d, d_model) disagree in shape");
  TORCH_CHECK(n_heads > 0 && key_weight.size(0) % n_heads == 0, "n_heads must divide the projection width");
  const Tensor none = torch::empty({0}, query.options());
  auto result = ScoreProjection::apply(query, query_weight, query_bias.value_or(none), key_weight,
                                       key_bias.value_or(none), n_heads);
  std::optional<Tensor> bias;
  if (key_bias.has_value()) bias = result[1];
  return {result[0], bias};
}

}  // namespace recurrent_attention
