// The compiled kernels' entry points (bindings.cpp exposes them to Python as one module).
#pragma once

#include <torch/extension.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace recurrent_attention {

// prefix_attention._ChunkCumulativeAttention: (out, m, u, w, late), late None when no row is late.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, std::optional<torch::Tensor>>
cumulative_attention(const torch::Tensor& scores, const torch::Tensor& values,
                     const std::optional<torch::Tensor>& carry_m, const std::optional<torch::Tensor>& carry_u,
                     const std::optional<torch::Tensor>& carry_w, double limit);

// AarenAttention.value_score_projection: (F (d + n_heads, d_model), f (d + n_heads) or None), values
// then scores of tokens x being x F^T + f, from the fused q/k/v weight (3 d, d_model) and bias.
std::tuple<torch::Tensor, std::optional<torch::Tensor>> value_score_projection(
    const torch::Tensor& query, const torch::Tensor& qkv_weight, const std::optional<torch::Tensor>& qkv_bias,
    int64_t n_heads);

class BufferPool;  // stack_step.cpp: memory for what a step returns, kept from step to step

// A layer stack's eval step for a (batch, d_model) token through every block (models.blocks.LayerStack's
// step in eval mode without gradients, deploy.lean's layout) for a mixer with a constant-size state:
// "aaren" (state (m, u, w) per block) or "linear" (linear attention, (S, z) per block, `mixer_eps`
// the normaliser's eps). The weights are laid out once by the Python side: per block, in this order,
// the mixer's input projection (d_model, width) and its bias (Aaren: values then scores, width
// d_model + H; linear: the fused q/k/v, 3 d_model), the output projection and bias, the
// feed-forward's two (transposed) weights and biases, then the two layer norms' weights and biases;
// per block the two layer norms' epsilons. ``sources`` are the parameters the weights were laid out
// from: their version counters are read at construction. Up to ``raw_rows`` rows the matrix
// products are loops on packed weights, past it ATen's sgemm (stack_step.cpp says why).
// ``weight_format`` "bfloat16" (float32 models): the four matrices of each block rounded to bfloat16,
// half the bytes a token reads; "float32" keeps the weights' own dtype.
class StackStepper {
 public:
  StackStepper(const std::string& mixer, std::vector<torch::Tensor> weights, std::vector<double> eps,
               bool norm_first, bool gelu, std::optional<torch::Tensor> final_weight,
               std::optional<torch::Tensor> final_bias, double final_eps, int64_t heads, int64_t d_head,
               double mixer_eps, std::vector<torch::Tensor> sources, int64_t raw_rows,
               const std::string& weight_format);
  StackStepper(const StackStepper&) = delete;
  StackStepper& operator=(const StackStepper&) = delete;
  ~StackStepper();
  std::tuple<torch::Tensor, std::vector<torch::Tensor>> step(const torch::Tensor& token,
                                                             const std::vector<torch::Tensor>& state) const;
  // step() where it applies: gradients and CPU autocast off, no JIT tracer, a CPU (batch, d_model)
  // token and a state of the weights' dtype, and no source parameter changed in place since the
  // layout (an optimiser step, a state-dict load); nullopt otherwise. These are the checks every
  // token needs, done here because each Python operation around a one-token step costs more than
  // the check itself.
  std::optional<std::tuple<torch::Tensor, std::vector<torch::Tensor>>> try_step(
      const torch::Tensor& token, const std::vector<torch::Tensor>& state) const;

 private:
  struct Block;
  template <typename T>
  void run(torch::Tensor& x, const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& next) const;

  std::vector<Block> blocks_;
  bool linear_ = false, norm_first_, gelu_;
  std::optional<torch::Tensor> final_weight_, final_bias_;
  double final_eps_;
  int64_t heads_, d_head_;
  double mixer_eps_;
  int64_t raw_rows_;
  c10::ScalarType dtype_ = c10::ScalarType::Float;
  std::vector<torch::Tensor> sources_;
  std::vector<int64_t> versions_;
  std::shared_ptr<BufferPool> pool_;
};

}  // namespace recurrent_attention
