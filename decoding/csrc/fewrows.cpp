// Few-row linear products for decoding steps on the CPU (decoding/fewrows.py builds and loads this).
//
// y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]) for a handful of rows m (one decoding step's fed
// tokens). Each weight is packed once into panels of PANEL output columns, [ceil(N / PANEL)][K][PANEL],
// so a product streams every weight exactly once, contiguously, for up to ROWS rows: a sweep over a
// panel keeps up to WIDE rows' accumulators in vector registers while its weights go by (software
// prefetch a few KiB ahead; the rows' inputs are broadcast from memory, a load port's work, which
// leaves both FMA ports of an Intel core to the products), and the panels are shared among torch's
// threads.
//
// Row invariance: a row's result does not depend on the other rows of the product. Each output
// element is the same chain of fused multiply-adds over k = 0 .. K-1 whether the product has one
// row or thirty-two, so a step that feeds eight tokens computes each token's products bit for bit as
// an AR step would (tests/test_fewrows.py checks it).

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

// WIDE: rows one sweep over a panel keeps in registers (NV accumulators each). ROWS: rows one pass
// over the panels takes; above WIDE each panel is swept once per group of WIDE rows, the later
// sweeps from L2, so the weights still stream from memory once for up to ROWS rows.
#if defined(__AVX512F__)
constexpr int LANES = 16;  // floats per vector register
constexpr int PANEL = 32;  // output columns per panel: two registers per row
constexpr int WIDE = 12;   // 24 accumulators of 32 registers
constexpr int ROWS = 32;
#elif defined(__AVX__)
constexpr int LANES = 8;
constexpr int PANEL = 16;
constexpr int WIDE = 6;    // 12 accumulators of 16 registers
constexpr int ROWS = 24;
#else
constexpr int LANES = 4;
constexpr int PANEL = 16;
constexpr int WIDE = 3;
constexpr int ROWS = 12;
#endif
constexpr int NV = PANEL / LANES;  // vectors per row of a panel
constexpr int AHEAD = 2048 / (PANEL * 4);  // prefetch distance in k steps (about 2 KiB)

typedef float vec __attribute__((vector_size(LANES * 4)));

static inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// *p in every lane, loaded as a broadcast (a load port's work): built from a register, the
// broadcast is a shuffle, and on Intel's cores the shuffle port is also an FMA port.
static inline vec broadcast(const float* p) {
#if defined(__AVX512F__)
  return (vec)_mm512_broadcastss_ps(_mm_load_ss(p));
#elif defined(__AVX__)
  return (vec)_mm256_broadcast_ss(p);
#else
  return vec{} + *p;
#endif
}

// The panels of W [N, K]: [ceil(N / PANEL), K, PANEL], the last one zero-padded.
static torch::Tensor pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat32 && weight.device().is_cpu(),
              "fewrows.pack: a 2-d float32 CPU weight");
  auto w = weight.contiguous();
  const int64_t N = w.size(0), K = w.size(1), B = (N + PANEL - 1) / PANEL;
  auto out = torch::zeros({B, K, PANEL}, w.options());
  const float* src = w.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t c = 0; c < PANEL && b * PANEL + c < N; ++c)
        for (int64_t k = 0; k < K; ++k) dst[(b * K + k) * PANEL + c] = src[(b * PANEL + c) * K + k];
  });
  return out;
}

// One panel's columns for M rows: their accumulators in registers while the panel goes by once.
template <int M>
static inline void sweep(const float* __restrict x, int64_t K, const float* __restrict wp, const float* bias,
                         float* __restrict y, int64_t N, int64_t n0) {
  vec acc[M][NV];
  for (int m = 0; m < M; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = vec{};
  for (int64_t k = 0; k < K; ++k) {
    const float* w = wp + k * PANEL;
    for (int l = 0; l < PANEL * 4; l += 64) __builtin_prefetch(reinterpret_cast<const char*>(w + AHEAD * PANEL) + l, 0, 3);
    vec wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = load(w + v * LANES);
    for (int m = 0; m < M; ++m) {
      const vec xv = broadcast(x + m * K + k);
      for (int v = 0; v < NV; ++v) acc[m][v] += xv * wv[v];
    }
  }
  const int64_t cols = N - n0 < PANEL ? N - n0 : PANEL;
  float buf[PANEL];
  for (int m = 0; m < M; ++m) {
    std::memcpy(buf, acc[m], sizeof buf);
    float* out = y + m * N + n0;
    if (bias != nullptr)
      for (int64_t c = 0; c < cols; ++c) out[c] = buf[c] + bias[n0 + c];
    else
      for (int64_t c = 0; c < cols; ++c) out[c] = buf[c];
  }
}

// One panel for M rows: one sweep over it (M <= WIDE), or one per group of rows, the groups as
// even as ceil(M / WIDE) sweeps allow (the later sweeps read the panel from L2: a panel is a few
// hundred KiB at most). Even groups matter where FMA latency binds: with AVX2's WIDE = 6, eight
// rows as 6 + 2 leave the second sweep's four accumulators waiting on their chains (a 2-row sweep
// costs what a 4-row one does), where 4 + 4 keeps both sweeps' FMA ports busy (issue 21, measured
// on a 2-core AMD EPYC, all 211 products of a step: 8 rows 50.3 -> 35.9 ms, one row 19-22). Either way each output element is
// the same chain of fused multiply-adds over k.
template <int M>
static inline void panel(const float* x, int64_t K, const float* wp, const float* bias, float* y, int64_t N,
                         int64_t n0) {
  if constexpr (M <= WIDE) {
    sweep<M>(x, K, wp, bias, y, N, n0);
  } else {
    constexpr int G = (M + (M + WIDE - 1) / WIDE - 1) / ((M + WIDE - 1) / WIDE);  // ceil(M / sweeps)
    sweep<G>(x, K, wp, bias, y, N, n0);
    panel<M - G>(x + G * K, K, wp, bias, y + G * N, N, n0);
  }
}

template <int M>
static void rows_pass(const float* x, int64_t K, const float* wp, const float* bias, float* y, int64_t N, int64_t B) {
  at::parallel_for(0, B, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) panel<M>(x, K, wp + b * K * PANEL, bias, y, N, b * PANEL);
  });
}

template <int M>
static void dispatch(int64_t m, const float* x, int64_t K, const float* wp, const float* bias, float* y, int64_t N,
                     int64_t B) {
  if constexpr (M > 1) {
    if (m < M) return dispatch<M - 1>(m, x, K, wp, bias, y, N, B);
  }
  rows_pass<M>(x, K, wp, bias, y, N, B);
}

// x [R, K] @ W.T (+ bias) -> [R, N], W given as its panels. ``rows`` > R: computed as that many
// rows, the extra ones zero (where a machine sweeps a few more rows faster than these: on a 2-core AMD
// EPYC with AVX2, 2- and 3-row sweeps take longer than 4-row ones; decoding/kernels.py measures it).
// Each real row's result is the same either way (row invariance).
static torch::Tensor linear(const torch::Tensor& x_, const torch::Tensor& packed, const c10::optional<torch::Tensor>& bias_,
                            int64_t N, int64_t rows) {
  TORCH_CHECK(x_.dim() == 2 && x_.scalar_type() == torch::kFloat32 && x_.device().is_cpu(),
              "fewrows.linear: a 2-d float32 CPU input");
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == PANEL && packed.size(1) == x_.size(1) &&
                  packed.size(0) == (N + PANEL - 1) / PANEL && packed.is_contiguous(),
              "fewrows.linear: the panels do not fit the input or N");
  const int64_t R0 = x_.size(0);
  auto x = x_.contiguous();
  if (rows > R0) {
    auto padded = torch::zeros({rows, x.size(1)}, x.options());
    padded.narrow(0, 0, R0).copy_(x);
    x = padded;
  }
  c10::optional<torch::Tensor> bias;
  if (bias_.has_value() && bias_->defined()) {
    TORCH_CHECK(bias_->numel() == N && bias_->scalar_type() == torch::kFloat32, "fewrows.linear: bias of N floats");
    bias = bias_->contiguous();
  }
  const int64_t R = x.size(0), K = x.size(1), B = packed.size(0);
  auto y = torch::empty({R, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  for (int64_t r = 0; r < R; r += ROWS) {
    const int64_t m = R - r < ROWS ? R - r : ROWS;
    dispatch<ROWS>(m, xp + r * K, K, wp, bp, yp + r * N, N, B);
  }
  return R > R0 ? y.narrow(0, 0, R0) : y;
}

static int64_t panel_width() { return PANEL; }

#define FEWROWS_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define FEWROWS_IMPL(ns, k, m) TORCH_LIBRARY_IMPL(ns, k, m)

FEWROWS_LIBRARY(FEWROWS_NS, m) {
  m.def("pack(Tensor weight) -> Tensor");
  m.def("linear(Tensor x, Tensor packed, Tensor? bias, int n, int rows=0) -> Tensor");
  m.def("panel_width() -> int", &panel_width);
}

FEWROWS_IMPL(FEWROWS_NS, CPU, m) {
  m.impl("pack", &pack);
  m.impl("linear", &linear);
}
