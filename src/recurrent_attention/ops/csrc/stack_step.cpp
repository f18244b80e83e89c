// A residual layer stack's eval step for one token (models.blocks.LayerStack's lean path,
// deploy.lean) as one C++ call, for the mixers whose state has a constant size: Aaren's (m, u, w)
// and linear attention's (S, z). At batch 1 a token reads ~1.5 MB of weights for ~0.7 MFLOP, and
// an ATen call per matrix product or layer norm costs as much as its arithmetic (~2-4 us each, a
// GELU of 512 values 8 us: ~70 us a token where reading the weights takes ~19). So for up to
// `raw_rows` rows every part is a plain loop here: matrix-vector products over weights packed
// once into column panels (each panel read front to back, its accumulators held in vector
// registers), layer norms, the activation, the mixer's update. Past `raw_rows` rows a weight is
// reused across rows and ATen's sgemm wins: the products are ATen calls there, the rest the same
// loops. The loops are vectorised by the compiler (ops/native.py builds with -march=native where
// the compiler takes it): a vector below is the widest the target has.
#include "native.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

// Fused multiply-adds (a * b + c rounded once) in this file only: ops/native.py builds every kernel
// with -ffp-contract=off so that the training kernels' results do not depend on which loop, vector or
// tail, reached an element (an old-layout checkpoint resumes bit for bit as the fused one:
// tests/test_migration.py). The step is tested equal to the model's step within a tolerance, not bit
// for bit, and its products are its cost. After the includes, so that only this file's functions
// carry the option (GCC inlines the headers' functions into them all the same).
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

namespace recurrent_attention {
namespace {

using torch::Tensor;

constexpr int64_t kWeightsPerBlock = 12;
// The widest vector the build's target has, and how many accumulators a panel's product keeps:
// 8 vectors of columns per panel, and with AVX-512's 32 registers two sets of them (even and odd
// rows of the weight), so that 16 independent sums hide the FMA latency; with 16 registers one set.
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64, kSets = 2;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32, kSets = 1;
#else
constexpr int kVectorBytes = 16, kSets = 1;
#endif
constexpr int64_t kPanelVectors = 8;
// Rows per task of at::parallel_for (one token's elementwise work is too small to share).
constexpr int64_t kRowGrain = 16;

template <typename T>
struct Simd {
  typedef T V __attribute__((vector_size(kVectorBytes)));
};

template <typename T>
constexpr int64_t kLanes = kVectorBytes / sizeof(T);

template <typename T>
inline typename Simd<T>::V load(const T* p) {
  typename Simd<T>::V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename T>
inline void store(T* p, const typename Simd<T>::V& v) {
  std::memcpy(p, &v, sizeof(v));
}

// A weight (in, out) laid out for gemv: out padded to whole vectors, then cut into column panels
// of kPanelVectors vectors (the last may be narrower), each stored whole (in x width) one after
// the other, so the panel starting at column c starts at element in * c. The bias, padded alike.
// `bf16`: the panels hold the weights rounded to bfloat16 (to nearest even), half the bytes a token
// reads, each row's vectors in pairs with their values interleaved (a panel of an odd number of
// vectors gets a zero one): a 32-bit word holds a column of the pair's first vector in its low half
// and one of its second in its high half, and as a bfloat16 is a float's upper 16 bits, one shift
// and one mask widen a loaded vector of words to the two float vectors (gemv_panel_bf16).
struct Packed {
  Tensor panels, bias;
  int64_t in = 0, out = 0, padded = 0;
  bool bf16 = false;
};

Packed pack(const Tensor& weight_t, const Tensor& bias, bool bf16) {
  const int64_t in = weight_t.size(0), out = weight_t.size(1);
  const int64_t lanes = kVectorBytes / weight_t.element_size(), width = kPanelVectors * lanes;
  const int64_t padded = (out + lanes - 1) / lanes * lanes;
  Tensor full = at::zeros({in, padded}, weight_t.options());
  full.narrow(1, 0, out).copy_(weight_t);
  std::vector<Tensor> panels;
  for (int64_t c = 0; c < padded; c += width) {
    Tensor panel = full.narrow(1, c, std::min(width, padded - c));
    if (bf16) {
      const int64_t vectors = panel.size(1) / lanes, pairs = (vectors + 1) / 2;
      if (vectors % 2) panel = at::cat({panel, at::zeros({in, lanes}, panel.options())}, 1);
      panel = panel.reshape({in, pairs, 2, lanes}).transpose(2, 3).to(at::kBFloat16);
    }
    panels.push_back(panel.flatten());
  }
  Tensor padded_bias = at::zeros({padded}, bias.options());
  padded_bias.narrow(0, 0, out).copy_(bias);
  return {at::cat(panels), padded_bias, in, out, padded, bf16};
}

// y (kVectors * lanes) = bias + x W over one panel: the accumulators stay in registers and the
// panel is read once, front to back.
template <typename T, int kVectors>
inline void gemv_panel(const T* x, const T* panel, const T* bias, int64_t in, T* y) {
  using V = typename Simd<T>::V;
  constexpr int64_t lanes = kLanes<T>;
  V acc[kSets][kVectors];
  for (int k = 0; k < kVectors; ++k) {
    acc[0][k] = load(bias + k * lanes);
    for (int set = 1; set < kSets; ++set) acc[set][k] = V{};
  }
  int64_t i = 0;
  for (; i + kSets <= in; i += kSets) {
    for (int set = 0; set < kSets; ++set) {
      const V xi = V{} + x[i + set];
      const T* w = panel + (i + set) * kVectors * lanes;
      for (int k = 0; k < kVectors; ++k) acc[set][k] += xi * load(w + k * lanes);
    }
  }
  for (; i < in; ++i) {
    const V xi = V{} + x[i];
    for (int k = 0; k < kVectors; ++k) acc[0][k] += xi * load(panel + (i * kVectors + k) * lanes);
  }
  for (int k = 0; k < kVectors; ++k) {
    for (int set = 1; set < kSets; ++set) acc[0][k] += acc[set][k];
    store(y + k * lanes, acc[0][k]);
  }
}

// gemv_panel on a bfloat16 panel of interleaved pairs (Packed): per row, a vector of 32-bit words
// gives two float vectors, the low halves shifted up and the high halves masked.
template <int kVectors>
inline void gemv_panel_bf16(const float* x, const uint16_t* panel, const float* bias, int64_t in, float* y) {
  using V = Simd<float>::V;
  typedef uint32_t Word __attribute__((vector_size(kVectorBytes)));
  constexpr int64_t lanes = kLanes<float>, pairs = (kVectors + 1) / 2;
  V acc[2 * pairs];
  for (int k = 0; k < kVectors; ++k) acc[k] = load(bias + k * lanes);
  for (int k = kVectors; k < 2 * pairs; ++k) acc[k] = V{};
  for (int64_t i = 0; i < in; ++i) {
    const V xi = V{} + x[i];
    const uint16_t* w = panel + i * 2 * pairs * lanes;
    for (int pair = 0; pair < pairs; ++pair) {
      Word word;
      std::memcpy(&word, w + 2 * pair * lanes, sizeof(word));
      const Word low = word << 16, high = word & 0xFFFF0000u;
      V first, second;
      std::memcpy(&first, &low, sizeof(first));
      std::memcpy(&second, &high, sizeof(second));
      acc[2 * pair] += xi * first;
      acc[2 * pair + 1] += xi * second;
    }
  }
  for (int k = 0; k < kVectors; ++k) store(y + k * lanes, acc[k]);
}

// The panel kernel for weights of type W: T's own, or bfloat16 bits.
template <typename T, int kVectors, typename W>
inline void gemv_panel_of(const T* x, const W* panel, const T* bias, int64_t in, T* y) {
  if constexpr (std::is_same_v<W, uint16_t>) {
    gemv_panel_bf16<kVectors>(x, panel, bias, in, y);
  } else {
    gemv_panel<T, kVectors>(x, panel, bias, in, y);
  }
}

// y (out) = bias + x (in) W for one row, on panels of weights of type W (T, or bfloat16 bits).
template <typename T, typename W>
void gemv_panels(const Packed& m, const W* panels, const T* x, T* y) {
  constexpr int64_t lanes = kLanes<T>, width = kPanelVectors * lanes;
  const T* bias = m.bias.data_ptr<T>();
  alignas(64) T tail[width];
  for (int64_t c = 0; c < m.padded; c += width) {
    const int64_t vectors = std::min(width, m.padded - c) / lanes;
    T* dst = c + vectors * lanes <= m.out ? y + c : tail;  // the last panel's padding goes to tail
    const W* panel = panels + m.in * c;
    switch (vectors) {
      case 8: gemv_panel_of<T, 8>(x, panel, bias + c, m.in, dst); break;
      case 7: gemv_panel_of<T, 7>(x, panel, bias + c, m.in, dst); break;
      case 6: gemv_panel_of<T, 6>(x, panel, bias + c, m.in, dst); break;
      case 5: gemv_panel_of<T, 5>(x, panel, bias + c, m.in, dst); break;
      case 4: gemv_panel_of<T, 4>(x, panel, bias + c, m.in, dst); break;
      case 3: gemv_panel_of<T, 3>(x, panel, bias + c, m.in, dst); break;
      case 2: gemv_panel_of<T, 2>(x, panel, bias + c, m.in, dst); break;
      default: gemv_panel_of<T, 1>(x, panel, bias + c, m.in, dst); break;
    }
    if (dst == tail) std::copy(tail, tail + (m.out - c), y + c);
  }
}

// y (out) = bias + x (in) W for one row, on packed weights (bfloat16 ones only where T is float:
// the constructor refuses them for double).
template <typename T>
void gemv(const Packed& m, const T* x, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (m.bf16) {
      gemv_panels(m, reinterpret_cast<const uint16_t*>(m.panels.data_ptr<at::BFloat16>()), x, y);
      return;
    }
  }
  gemv_panels(m, m.panels.data_ptr<T>(), x, y);
}

template <typename T>
T hsum(const typename Simd<T>::V& v) {
  T sum = 0;
  for (int64_t k = 0; k < kLanes<T>; ++k) sum += v[k];
  return sum;
}

// F.layer_norm of one row (biased variance, eps inside the root); y may be x.
template <typename T>
void layer_norm(const T* x, const T* weight, const T* bias, T eps, int64_t n, T* y) {
  using V = typename Simd<T>::V;
  constexpr int64_t lanes = kLanes<T>;
  V acc{};
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) acc += load(x + i);
  T sum = hsum<T>(acc);
  for (; i < n; ++i) sum += x[i];
  const T mean = sum / n;
  acc = V{};
  for (i = 0; i + lanes <= n; i += lanes) {
    const V centred = load(x + i) - mean;
    acc += centred * centred;
  }
  T squares = hsum<T>(acc);
  for (; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const T rstd = 1 / std::sqrt(squares / n + eps);
  for (i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
}

// erf in float: a rational approximation on [-4, 4] (erf is +-1 in float outside), within 4.2e-7
// of erf; torch's own vectorised erf is an approximation too. No branch or call, so it vectorises.
inline float erf_of(float a) {
  const float x = std::min(std::max(a, -4.0f), 4.0f), x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * p / q;
}

inline double erf_of(double x) { return std::erf(x); }

// exp in float for x <= 88 (Cephes' expf: 2^n times a polynomial of the rest, within 1e-7
// relative), written without calls so that a loop of it vectorises.
inline float exp_of(float a) {
  const float x = std::min(std::max(a, -87.3f), 88.3f);
  // n = x / ln 2 rounded to the nearest integer by the 1.5 * 2^23 trick (std::floor does not vectorise)
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// phi(x) = elu(x) + 1, linear attention's feature map (models.linear_attention.feature_map).
// (Both sides are computed whatever x, so that the loop has no branch and vectorises.)
inline float feature_of(float x) {
  const float positive = x + 1, negative = exp_of(std::min(x, 0.0f));
  return x > 0 ? positive : negative;
}
inline double feature_of(double x) { return x > 0 ? x + 1 : std::expm1(x) + 1; }

template <typename T>
void activate(T* x, int64_t n, bool gelu) {
  if (gelu) {
    const T root_half = static_cast<T>(0.70710678118654752440);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * T(0.5) * (1 + erf_of(x[i] * root_half));
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0 ? T(0) : x[i];
  }
}

// Aaren's update of one row, finite scores (attention_step with finite_scores=True):
// m' = max(m, s); u' = u e^(m-m') + e^(s-m'); w' = w e^(m-m') + v e^(s-m'); out = w' / u'.
template <typename T>
void aaren_update(const T* projected, const T* const* state, T* const* next, T* out, int64_t heads,
                  int64_t d_head) {
  const T *values = projected, *scores = projected + heads * d_head;
  const T *m = state[0], *u = state[1], *w = state[2];
  T *m_out = next[0], *u_out = next[1], *w_out = next[2];
  for (int64_t h = 0; h < heads; ++h) {
    const T s = scores[h], top = std::max(m[h], s);
    const T old_scale = std::exp(m[h] - top), new_scale = std::exp(s - top);
    const T total = u[h] * old_scale + new_scale;
    m_out[h] = top;
    u_out[h] = total;
    const T* v = values + h * d_head;
    for (int64_t k = 0; k < d_head; ++k) {
      const T weighted = w[h * d_head + k] * old_scale + v[k] * new_scale;
      w_out[h * d_head + k] = weighted;
      out[h * d_head + k] = weighted / total;
    }
  }
}

// Linear attention's update of one row (models.linear_attention.recurrent_step): with phi(q),
// phi(k) and v of each head, S' = S + phi(k) v^T, z' = z + phi(k), out = phi(q)^T S' / (phi(q).z' + eps).
// The features are written over q and k in `projected`. The columns of S' go a vector at a time,
// each vector's sum over the rows, phi(q)^T S', held in a register: S (d_head^2 per head) is
// read and S' written once, with no pass over `out` per row of S.
template <typename T>
void linear_update(T* projected, const T* const* state, T* const* next, T* out, int64_t heads, int64_t d_head,
                   T eps) {
  using V = typename Simd<T>::V;
  constexpr int64_t lanes = kLanes<T>;
  const int64_t d = heads * d_head;
  for (int64_t i = 0; i < 2 * d; ++i) projected[i] = feature_of(projected[i]);
  for (int64_t h = 0; h < heads; ++h) {
    // (restrict: no two of these overlap, which lets the loops vectorise without checks)
    const T *__restrict q = projected + h * d_head, *__restrict k = q + d, *__restrict v = k + d;
    const T *__restrict s = state[0] + h * d_head * d_head, *__restrict z = state[1] + h * d_head;
    T *__restrict s_out = next[0] + h * d_head * d_head, *__restrict z_out = next[1] + h * d_head;
    T* __restrict o = out + h * d_head;
    T denominator = 0;
    for (int64_t i = 0; i < d_head; ++i) {
      z_out[i] = z[i] + k[i];
      denominator += q[i] * z_out[i];
    }
    const T scale = 1 / (denominator + eps);
    int64_t j = 0;
    for (; j + lanes <= d_head; j += lanes) {
      const V v_j = load(v + j);
      V numerator{};
      for (int64_t i = 0; i < d_head; ++i) {
        const V sum = load(s + i * d_head + j) + k[i] * v_j;
        store(s_out + i * d_head + j, sum);
        numerator += q[i] * sum;
      }
      store(o + j, numerator * scale);
    }
    for (; j < d_head; ++j) {  // d_head not a whole number of vectors: the last columns one by one
      T numerator = 0;
      for (int64_t i = 0; i < d_head; ++i) {
        const T sum = s[i * d_head + j] + k[i] * v[j];
        s_out[i * d_head + j] = sum;
        numerator += q[i] * sum;
      }
      o[j] = numerator * scale;
    }
  }
}

template <typename F>
void for_rows(int64_t rows, const F& body) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) body(r);
  });
}

}  // namespace

// Memory for the state a step returns and for its scratch, kept for the next step. A stream replaces
// its state every token, and allocating it afresh each time is not free: at batch 64 linear
// attention's S is 1 MB a layer, and glibc hands the memory it frees at the top of its heap back to
// the system, so the next step's buffers came back as page faults (~45 a step measured, ~0.3 ms of
// a ~0.7 ms step). A buffer returns to the pool only when the tensor holding it is freed, so a state
// the caller still holds (to branch a stream, to compare) is never written over; at most `limit`
// free buffers are kept, the rest go back to the allocator.
class BufferPool {
 public:
  explicit BufferPool(size_t limit) : limit_(limit) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool() {
    for (const auto& kept : free_) std::free(kept.second);
  }

  // `bytes` (a whole number of 64-byte lines) aligned to 64 bytes, a kept buffer of that size if any.
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // the most recently freed first: its lines are the likeliest still in cache
      for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
        if (it->first == bytes) {
          void* data = it->second;
          free_.erase(std::next(it).base());
          return data;
        }
      }
    }
    void* data = std::aligned_alloc(64, bytes);
    TORCH_CHECK(data != nullptr, "StackStepper: out of memory for ", bytes, " bytes");
    return data;
  }

  void give_back(void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() < limit_) {
      free_.emplace_back(bytes, data);
    } else {
      std::free(data);
    }
  }

  // An uninitialised tensor of `sizes` whose memory comes from `pool` and goes back to it when freed
  // (the deleter holds the pool, so a tensor may outlive the stepper).
  static Tensor empty(const std::shared_ptr<BufferPool>& pool, at::IntArrayRef sizes, const at::TensorOptions& options) {
    const size_t used = static_cast<size_t>(c10::multiply_integers(sizes)) * options.dtype().itemsize();
    const size_t bytes = (used + 63) / 64 * 64 + (used == 0 ? 64 : 0);
    return at::from_blob(
        pool->take(bytes), sizes, [pool, bytes](void* data) { pool->give_back(data, bytes); }, options);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<size_t, void*>> free_;
  const size_t limit_;
};

struct StackStepper::Block {
  Packed mix, out, ff_in, ff_out;
  Tensor mix_weight, mix_bias, out_weight, out_bias, ff_in_weight, ff_in_bias, ff_out_weight, ff_out_bias;
  Tensor norm_mix_weight, norm_mix_bias, norm_ff_weight, norm_ff_bias;
  double eps_mix, eps_ff;
};

StackStepper::StackStepper(const std::string& mixer, std::vector<Tensor> weights, std::vector<double> eps,
                           bool norm_first, bool gelu, std::optional<Tensor> final_weight,
                           std::optional<Tensor> final_bias, double final_eps, int64_t heads, int64_t d_head,
                           double mixer_eps, std::vector<Tensor> sources, int64_t raw_rows,
                           const std::string& weight_format)
    : norm_first_(norm_first),
      gelu_(gelu),
      final_weight_(std::move(final_weight)),
      final_bias_(std::move(final_bias)),
      final_eps_(final_eps),
      heads_(heads),
      d_head_(d_head),
      mixer_eps_(mixer_eps),
      raw_rows_(raw_rows),
      sources_(std::move(sources)) {
  TORCH_CHECK(mixer == "aaren" || mixer == "linear", "StackStepper: mixer 'aaren' or 'linear', not '", mixer, "'");
  linear_ = mixer == "linear";
  TORCH_CHECK(!weights.empty() && weights.size() % kWeightsPerBlock == 0 && eps.size() * 6 == weights.size(),
              "StackStepper: 12 weights and 2 epsilons per block");
  const int64_t d_model = heads * d_head, width = linear_ ? 3 * d_model : d_model + heads;
  dtype_ = weights.front().scalar_type();
  TORCH_CHECK(dtype_ == at::kFloat || dtype_ == at::kDouble, "StackStepper: float32 or float64 weights");
  for (Tensor& weight : weights) {
    TORCH_CHECK(weight.scalar_type() == dtype_ && weight.device().is_cpu(), "StackStepper: CPU weights of one dtype");
    weight = weight.contiguous();
  }
  TORCH_CHECK(weight_format == "float32" || weight_format == "bfloat16",
              "StackStepper: weight_format 'float32' or 'bfloat16', not '", weight_format, "'");
  const bool bf16 = weight_format == "bfloat16";
  TORCH_CHECK(!bf16 || dtype_ == at::kFloat, "StackStepper: bfloat16 weights for a float32 model only");
  // Past raw_rows the products are ATen's on float weights: with bfloat16 ones, the same rounded values.
  auto matrix = [bf16](const Tensor& weight) { return bf16 ? weight.to(at::kBFloat16).to(at::kFloat) : weight; };
  for (size_t b = 0; b < weights.size() / kWeightsPerBlock; ++b) {
    const Tensor* w = weights.data() + b * kWeightsPerBlock;
    TORCH_CHECK(w[0].dim() == 2 && w[0].size(0) == d_model && w[0].size(1) == width && w[2].size(0) == d_model &&
                    w[4].size(0) == d_model && w[6].size(1) == d_model && w[4].size(1) == w[6].size(0),
                "StackStepper: block ", b, "'s weights do not fit d_model ", d_model, " and its mixer");
    TORCH_CHECK(w[4].size(1) == weights[4].size(1), "StackStepper: one feed-forward width in every block");
    blocks_.push_back({pack(w[0], w[1], bf16), pack(w[2], w[3], bf16), pack(w[4], w[5], bf16),
                       pack(w[6], w[7], bf16), matrix(w[0]), w[1], matrix(w[2]), w[3], matrix(w[4]), w[5],
                       matrix(w[6]), w[7], w[8], w[9], w[10], w[11], eps[2 * b], eps[2 * b + 1]});
  }
  versions_.reserve(sources_.size());
  for (const Tensor& source : sources_) versions_.push_back(source._version());
  // a step's next state, the one before it (freed as the next step starts) and a scratch buffer
  pool_ = std::make_shared<BufferPool>(2 * (linear_ ? 2 : 3) * blocks_.size() + 2);
}

StackStepper::~StackStepper() = default;

std::optional<std::tuple<Tensor, std::vector<Tensor>>> StackStepper::try_step(const Tensor& token,
                                                                             const std::vector<Tensor>& state) const {
  if (at::GradMode::is_enabled() || at::autocast::is_autocast_enabled(at::kCPU) || torch::jit::tracer::isTracing() ||
      !token.device().is_cpu() || token.dim() != 2 || token.scalar_type() != dtype_)
    return std::nullopt;
  for (const Tensor& part : state)
    if (!part.device().is_cpu() || part.scalar_type() != dtype_) return std::nullopt;
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i]._version() != versions_[i]) return std::nullopt;
  return step(token, state);
}

std::tuple<Tensor, std::vector<Tensor>> StackStepper::step(const Tensor& token,
                                                           const std::vector<Tensor>& state) const {
  // No ATen call here is differentiated: below autograd's dispatch keys each goes straight to its kernel.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const int64_t parts = linear_ ? 2 : 3, blocks = static_cast<int64_t>(blocks_.size());
  const int64_t d_model = heads_ * d_head_;
  TORCH_CHECK(static_cast<int64_t>(state.size()) == parts * blocks, "StackStepper.step: ",
              linear_ ? "(S, z)" : "(m, u, w)", " per block, ", parts * blocks, " tensors, not ", state.size());
  TORCH_CHECK(token.dim() == 2 && token.size(1) == d_model, "StackStepper.step: a token is (batch, ", d_model, ")");
  const int64_t batch = token.size(0);
  // per row, each state part's size: (m, u, w) are (H), (H), (H, d_head); (S, z) (H, d_head, d_head), (H, d_head)
  const std::vector<int64_t> row_sizes =
      linear_ ? std::vector<int64_t>{d_model * d_head_, d_model} : std::vector<int64_t>{heads_, heads_, d_model};
  std::vector<Tensor> inputs, next;
  inputs.reserve(state.size());
  next.reserve(state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    TORCH_CHECK(state[i].scalar_type() == dtype_ && state[i].numel() == batch * row_sizes[i % parts],
                "StackStepper.step: state tensor ", i, " has ", state[i].numel(), " values of ",
                state[i].scalar_type(), ", not ", batch * row_sizes[i % parts], " of ", dtype_);
    inputs.push_back(state[i].contiguous());
    next.push_back(BufferPool::empty(pool_, state[i].sizes(), state[i].options()));
  }
  Tensor x = token.clone(at::MemoryFormat::Contiguous);  // the residual stream, then the output
  AT_DISPATCH_FLOATING_TYPES(dtype_, "stack_step", [&] { run<scalar_t>(x, inputs, next); });
  return {x, next};
}

template <typename T>
void StackStepper::run(Tensor& x_tensor, const std::vector<Tensor>& inputs, const std::vector<Tensor>& next) const {
  const int64_t batch = x_tensor.size(0), d_model = heads_ * d_head_, parts = linear_ ? 2 : 3;
  const Block& first = blocks_.front();
  const int64_t width = first.mix.out, d_ff = first.ff_in.out;
  // per row: h (d_model), projected (width), attended (d_model), mixed (d_model), hidden (d_ff)
  const int64_t row = 3 * d_model + width + d_ff;
  const Tensor scratch = BufferPool::empty(pool_, {batch * row}, x_tensor.options());
  T* const x = x_tensor.data_ptr<T>();
  T *const h = scratch.data_ptr<T>(), *const projected = h + batch * d_model, *const attended = projected + batch * width;
  T *const mixed = attended + batch * d_model, *const hidden = mixed + batch * d_model;
  const bool raw = batch <= raw_rows_;
  // y (batch, m.out) = b + x W, by rows on the packed weights or as one ATen sgemm
  auto matmul = [&](const Packed& m, const Tensor& weight_t, const Tensor& bias, const T* in, T* y) {
    if (raw) {
      for_rows(batch, [&](int64_t r) { gemv<T>(m, in + r * m.in, y + r * m.out); });
    } else {
      const auto options = x_tensor.options();
      Tensor out = at::from_blob(y, {batch, m.out}, options);
      at::addmm_out(out, bias, at::from_blob(const_cast<T*>(in), {batch, m.in}, options), weight_t);
    }
  };
  auto norm = [&](const Tensor& weight, const Tensor& bias, double eps, const T* in, T* y) {
    const T *w = weight.data_ptr<T>(), *b = bias.data_ptr<T>();
    for_rows(batch, [&](int64_t r) { layer_norm<T>(in + r * d_model, w, b, T(eps), d_model, y + r * d_model); });
  };
  auto add = [&](const T* in, T* y) {
    for (int64_t i = 0; i < batch * d_model; ++i) y[i] += in[i];
  };
  for (size_t index = 0; index < blocks_.size(); ++index) {
    const Block& block = blocks_[index];
    const T* mix_in = x;
    if (norm_first_) {
      norm(block.norm_mix_weight, block.norm_mix_bias, block.eps_mix, x, h);
      mix_in = h;
    }
    matmul(block.mix, block.mix_weight, block.mix_bias, mix_in, projected);
    for_rows(batch, [&](int64_t r) {
      const T* state[3];
      T* updated[3];
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t size = next[index * parts + p].numel() / batch;
        state[p] = inputs[index * parts + p].data_ptr<T>() + r * size;
        updated[p] = next[index * parts + p].data_ptr<T>() + r * size;
      }
      T* out = attended + r * d_model;
      if (linear_) {
        linear_update<T>(projected + r * width, state, updated, out, heads_, d_head_, T(mixer_eps_));
      } else {
        aaren_update<T>(projected + r * width, state, updated, out, heads_, d_head_);
      }
    });
    matmul(block.out, block.out_weight, block.out_bias, attended, mixed);
    add(mixed, x);
    const T* ff_in = x;
    if (norm_first_) {
      norm(block.norm_ff_weight, block.norm_ff_bias, block.eps_ff, x, h);
      ff_in = h;
    } else {
      norm(block.norm_mix_weight, block.norm_mix_bias, block.eps_mix, x, x);
    }
    matmul(block.ff_in, block.ff_in_weight, block.ff_in_bias, ff_in, hidden);
    // Past raw_rows in a build for narrow vectors (no -march=native: SSE2 on x86-64), ATen's kernel,
    // which picks its vectors for this CPU at run time: Aaren's step at 64 rows took 647 us with the
    // loop in such a build and 391 us with it; with AVX-512, 309-361 us with the loop and ~380 with it.
    if (raw || kVectorBytes >= 32) {
      for_rows(batch, [&](int64_t r) { activate<T>(hidden + r * d_ff, d_ff, gelu_); });
    } else {
      Tensor activations = at::from_blob(hidden, {batch, d_ff}, x_tensor.options());
      gelu_ ? at::gelu_(activations) : at::relu_(activations);
    }
    matmul(block.ff_out, block.ff_out_weight, block.ff_out_bias, hidden, mixed);
    add(mixed, x);
    if (!norm_first_) norm(block.norm_ff_weight, block.norm_ff_bias, block.eps_ff, x, x);
  }
  if (final_weight_.has_value()) norm(*final_weight_, *final_bias_, final_eps_, x, x);
}

}  // namespace recurrent_attention
