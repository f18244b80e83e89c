// The compiled kernels' entry points (bindings.cpp exposes them to Python as one module).
#pragma once

#include <torch/extension.h>

#include <optional>
#include <tuple>

namespace recurrent_attention {

// prefix_attention._ChunkCumulativeAttention: (out, m, u, w, late), late None when no row is late.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, std::optional<torch::Tensor>>
cumulative_attention(const torch::Tensor& scores, const torch::Tensor& values,
                     const std::optional<torch::Tensor>& carry_m, const std::optional<torch::Tensor>& carry_u,
                     const std::optional<torch::Tensor>& carry_w, double limit);

// AarenAttention.score_projection: (A (d_model, n_heads), b (n_heads) or None).
std::tuple<torch::Tensor, std::optional<torch::Tensor>> score_projection(
    const torch::Tensor& query, const torch::Tensor& query_weight, const std::optional<torch::Tensor>& query_bias,
    const torch::Tensor& key_weight, const std::optional<torch::Tensor>& key_bias, int64_t n_heads);

}  // namespace recurrent_attention
