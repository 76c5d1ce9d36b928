// Matrix-core layouts of the HIP kernels, proven on the CPU (no GPU needed):
//   1. src/hip/mma_layout.h's per-lane index maps agree with the documented layouts (tests/hip/mma_models.h), for
//      every instruction the kernels use (MFMA on CDNA, WMMA on RDNA3, mma.sync on NVIDIA);
//   2. the kernels' own tile code (gemm_tile.h, attn_tile.h: staging, fragment loads, the order of matrix
//      instructions, the result stores), run lane by lane on the CPU with each instruction executed by its model,
//      computes the right GEMM and attention (over a paged KV cache of f32 or q8_0 values, query tiles spanning
//      sequences) for random inputs and odd sizes, for every weight format;
//   3. deliberately wrong layouts (transposed operands, the wrong accumulator interleave, missing WMMA replicas) are
//      caught by the same checks: the tests can fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "engine/kv_q8.h"
#include "hip/attn_tile.h"
#include "hip/gemm_tile.h"
#include "hip/mma_layout.h"
#include "mma_models.h"
#include "model/quants.h"
#include "model/tensor_types.h"

using namespace greta;
using namespace greta::hip;
using greta::hip::test::execute;
using greta::hip::test::Loc;
using greta::hip::test::Mfma16Model;
using greta::hip::test::Nv16Model;
using greta::hip::test::WaveRegs;
using greta::hip::test::Wmma16Model;

namespace {

// ---- deliberately wrong layouts (mutants): each must make a check below fail --------------------------------------
struct MfmaATransposed : MmaMfma16 {  // A read as A^T
  static RowCol a(int lane, int i) { return {4 * (lane / 16) + i, lane % 16}; }
};
struct MfmaDTransposed : MmaMfma16 {  // results stored transposed
  static RowCol c(int lane, int i) { return {lane % 16, 4 * (lane / 16) + i}; }
};
struct WmmaContiguousD : MmaWmma16 {  // accumulator rows as two contiguous halves instead of interleaved
  static RowCol c(int lane, int i) { return {i + 8 * (lane / 16), lane % 16}; }
};
struct WmmaNoReplica : MmaWmma16 {  // upper half-wave loads other rows of A than the lower one
  static RowCol a(int lane, int i) { return {lane < 16 ? lane : (lane + 1) % 16, i}; }
};
struct NvBHalvesSwapped : MmaNv16 {  // B items 0-3 taken from columns 8-15 and 4-7 from 0-7
  static RowCol b(int lane, int i) {
    const RowCol rc = MmaNv16::b(lane, i);
    return {rc.row, (rc.col + 8) % 16};
  }
};

// Integer-valued floats in [-r, r]: products and sums of them are exact in float, so results compare exactly.
std::vector<float> random_ints(size_t n, uint32_t seed, int r = 4) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-r, r);
  std::vector<float> v(n);
  for (auto& x : v) x = float(dist(rng));
  return v;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ---- 1. index maps vs the documented layouts ----------------------------------------------------------------------
template <class M, class Model>
void check_maps_match_model() {
  static_assert(M::kLanes == Model::kLanes && M::kA == Model::kA && M::kB == Model::kB && M::kC == Model::kC);
  auto contains = [](const std::vector<Loc>& locs, Loc l) { return std::find(locs.begin(), locs.end(), l) != locs.end(); };
  std::set<std::pair<int, int>> a_seen, b_seen, c_seen;
  for (int lane = 0; lane < M::kLanes; ++lane) {
    for (int i = 0; i < M::kA; ++i) {
      const RowCol rc = M::a(lane, i);
      REQUIRE((rc.row >= 0 && rc.row < 16 && rc.col >= 0 && rc.col < 16));
      CHECK_MESSAGE((contains(Model::a(rc.row, rc.col), Loc{lane, i})), "A lane ", lane, " item ", i);
      a_seen.insert({rc.row, rc.col});
    }
    for (int i = 0; i < M::kB; ++i) {
      const RowCol rc = M::b(lane, i);
      REQUIRE((rc.row >= 0 && rc.row < 16 && rc.col >= 0 && rc.col < 16));
      CHECK_MESSAGE((contains(Model::b(rc.row, rc.col), Loc{lane, i})), "B lane ", lane, " item ", i);
      b_seen.insert({rc.row, rc.col});
    }
    for (int i = 0; i < M::kC; ++i) {
      const RowCol rc = M::c(lane, i);
      REQUIRE((rc.row >= 0 && rc.row < 16 && rc.col >= 0 && rc.col < 16));
      CHECK_MESSAGE((Model::d(rc.row, rc.col) == Loc{lane, i}), "C/D lane ", lane, " item ", i);
      c_seen.insert({rc.row, rc.col});
    }
  }
  // Every element of each 16 x 16 operand is held somewhere (C/D exactly once: 256 = lanes x items).
  CHECK(a_seen.size() == 256);
  CHECK(b_seen.size() == 256);
  CHECK(c_seen.size() == 256);
  CHECK(M::kLanes * M::kC == 256);
}

// Models are self-consistent: each register of the wave holds exactly one element (A and B count their replicas).
template <class Model>
void check_model_is_a_layout(int replicas) {
  std::vector<int> a(Model::kLanes * Model::kA), b(Model::kLanes * Model::kB), d(Model::kLanes * Model::kC);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      CHECK(Model::a(r, c).size() == size_t(replicas));
      for (const Loc& l : Model::a(r, c)) ++a[size_t(l.lane * Model::kA + l.item)];
      for (const Loc& l : Model::b(r, c)) ++b[size_t(l.lane * Model::kB + l.item)];
      const Loc l = Model::d(r, c);
      ++d[size_t(l.lane * Model::kC + l.item)];
    }
  CHECK(std::all_of(a.begin(), a.end(), [](int n) { return n == 1; }));
  CHECK(std::all_of(b.begin(), b.end(), [](int n) { return n == 1; }));
  CHECK(std::all_of(d.begin(), d.end(), [](int n) { return n == 1; }));
}

// ---- 2a. one 16x16x16 tile through the kernels' fragment loads and the instruction model ---------------------------
// A stored "mk", B stored "nk" (weights, K cache) or "kn" (V cache), with row pitches that are not 16.
template <class M, class Model>
float tile_max_error(bool b_is_kn, uint32_t seed) {
  constexpr int ld_a = 24, ld_b = 21;
  const auto A = random_ints(16 * 16, seed), B = random_ints(16 * 16, seed + 1);  // A[m][k], B[k][n]
  std::vector<float> tile_a(16 * ld_a, 99.f), tile_b(16 * ld_b, 99.f);
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 16; ++k) tile_a[size_t(m * ld_a + k)] = A[size_t(m * 16 + k)];
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n)
      (b_is_kn ? tile_b[size_t(k * ld_b + n)] : tile_b[size_t(n * ld_b + k)]) = B[size_t(k * 16 + n)];
  WaveRegs a = test::make_regs(M::kLanes, M::kA), b = test::make_regs(M::kLanes, M::kB),
           c = test::make_regs(M::kLanes, M::kC);
  for (int lane = 0; lane < M::kLanes; ++lane) {
    load_a_mk<M>(lane, tile_a.data(), ld_a, 0, 0, a[size_t(lane)].data());
    if (b_is_kn)
      load_b_kn<M>(lane, tile_b.data(), ld_b, 0, 0, b[size_t(lane)].data());
    else
      load_b_nk<M>(lane, tile_b.data(), ld_b, 0, 0, b[size_t(lane)].data());
  }
  const WaveRegs d = execute<Model>(a, b, c);
  std::vector<float> out(256, 1e30f);
  for (int lane = 0; lane < M::kLanes; ++lane)
    for (int i = 0; i < M::kC; ++i) {
      const RowCol rc = M::c(lane, i);
      out[size_t(rc.row * 16 + rc.col)] = d[size_t(lane)][size_t(i)];
    }
  float err = 0;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float ref = 0;
      for (int k = 0; k < 16; ++k) ref += A[size_t(m * 16 + k)] * B[size_t(k * 16 + n)];
      err = std::max(err, std::fabs(out[size_t(m * 16 + n)] - ref));
    }
  return err;
}

// ---- 2b. the prefill GEMM, block by block, as gemm_kernel runs it -------------------------------------------------
// out[m][n] = sum_k A[m][k] * W[n][k]; W is `rows` rows of type W in its stored bytes. Threads of a block are
// simulated in order for the staging steps (they write disjoint LDS elements), lanes of a wave together for each
// matrix instruction.
template <class M, class Model, WType W>
std::vector<float> simulate_gemm(const std::vector<float>& A, const std::vector<uint8_t>& w, int64_t Mrows, int64_t N,
                                 int64_t K) {
  const uint64_t rb = row_bytes(W, K);
  std::vector<float> out(size_t(Mrows * N), std::nanf(""));
  constexpr int kThreads = gemm::kWaves * M::kLanes;
  std::vector<float> lds_a(gemm::kBM * gemm::kLdA), lds_b(gemm::kBN * gemm::kLdB);
  struct LaneAcc {
    float acc[2][2][M::kC];
  };
  struct Call {
    int mi, ni;
    float a[M::kA], b[M::kB];
  };
  for (int64_t m0 = 0; m0 < Mrows; m0 += gemm::kBM)
    for (int64_t n0 = 0; n0 < N; n0 += gemm::kBN) {
      std::vector<LaneAcc> acc(static_cast<size_t>(kThreads));
      for (auto& la : acc) std::memset(la.acc, 0, sizeof la.acc);
      for (int64_t k0 = 0; k0 < K; k0 += gemm::kBK) {
        std::fill(lds_a.begin(), lds_a.end(), std::nanf(""));  // anything not staged must not be read
        std::fill(lds_b.begin(), lds_b.end(), std::nanf(""));
        for (int tid = 0; tid < kThreads; ++tid) {
          gemm::stage_a(tid, kThreads, A.data(), K, Mrows, K, m0, k0, lds_a.data());
          gemm::stage_b<W>(tid, kThreads, w.data(), rb, N, K, n0, k0, lds_b.data());
        }
        for (int wave = 0; wave < gemm::kWaves; ++wave) {
          std::vector<std::vector<Call>> calls(M::kLanes);
          for (int lane = 0; lane < M::kLanes; ++lane)
            gemm::for_each_mma<M>(lane, wave, lds_a.data(), lds_b.data(),
                                  [&](int mi, int ni, const float* af, const float* bf) {
                                    Call c{mi, ni, {}, {}};
                                    std::copy(af, af + M::kA, c.a);
                                    std::copy(bf, bf + M::kB, c.b);
                                    calls[size_t(lane)].push_back(c);
                                  });
          for (size_t call = 0; call < calls[0].size(); ++call) {
            const int mi = calls[0][call].mi, ni = calls[0][call].ni;
            WaveRegs ra = test::make_regs(M::kLanes, M::kA), rb_ = test::make_regs(M::kLanes, M::kB),
                     rc = test::make_regs(M::kLanes, M::kC);
            for (int lane = 0; lane < M::kLanes; ++lane) {
              const Call& c = calls[size_t(lane)][call];
              if (c.mi != mi || c.ni != ni)  // every lane must issue the same instruction sequence
                throw std::runtime_error("lanes disagree on the matrix instruction sequence");
              float* lacc = acc[size_t(wave * M::kLanes + lane)].acc[mi][ni];
              std::copy(c.a, c.a + M::kA, ra[size_t(lane)].begin());
              std::copy(c.b, c.b + M::kB, rb_[size_t(lane)].begin());
              std::copy(lacc, lacc + M::kC, rc[size_t(lane)].begin());
            }
            const WaveRegs d = execute<Model>(ra, rb_, rc);
            for (int lane = 0; lane < M::kLanes; ++lane)
              std::copy(d[size_t(lane)].begin(), d[size_t(lane)].end(), acc[size_t(wave * M::kLanes + lane)].acc[mi][ni]);
          }
        }
      }
      for (int wave = 0; wave < gemm::kWaves; ++wave)
        for (int lane = 0; lane < M::kLanes; ++lane)
          gemm::store_c<M>(lane, wave, acc[size_t(wave * M::kLanes + lane)].acc, out.data(), N, Mrows, N, m0, n0,
                           nullptr);
    }
  return out;
}

// The reference: decode (matvec) semantics with the CPU codecs, out[m][n] = dot(dequantized W row n, A row m).
std::vector<double> reference_gemm(WType W, const std::vector<float>& A, const std::vector<uint8_t>& w, int64_t Mrows,
                                   int64_t N, int64_t K, std::vector<double>* magnitude = nullptr) {
  const auto type = static_cast<model::GgmlType>(W);
  const uint64_t rb = model::row_bytes(type, uint64_t(K));
  std::vector<float> row(static_cast<size_t>(K));
  std::vector<double> out(static_cast<size_t>(Mrows * N));
  if (magnitude) magnitude->assign(out.size(), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    model::dequantize_row(type, w.data() + uint64_t(n) * rb, row.data(), K);
    for (int64_t m = 0; m < Mrows; ++m) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += double(A[size_t(m * K + k)]) * row[size_t(k)];
        mag += std::fabs(double(A[size_t(m * K + k)]) * row[size_t(k)]);
      }
      out[size_t(m * N + n)] = s;
      if (magnitude) (*magnitude)[size_t(m * N + n)] = mag;
    }
  }
  return out;
}

std::vector<uint8_t> make_weights(WType W, const std::vector<float>& values, int64_t N, int64_t K) {
  const auto type = static_cast<model::GgmlType>(W);
  const uint64_t rb = model::row_bytes(type, uint64_t(K));
  std::vector<uint8_t> w(rb * uint64_t(N));
  for (int64_t n = 0; n < N; ++n) model::quantize_row(type, values.data() + n * K, w.data() + uint64_t(n) * rb, K);
  return w;
}

// Max |simulated - reference| over the GEMM, relative to the sum of |terms| of each output.
template <class M, class Model, WType W>
double gemm_error(int64_t Mrows, int64_t N, int64_t K, uint32_t seed, bool integers) {
  const auto A = integers ? random_ints(size_t(Mrows * K), seed) : random_floats(size_t(Mrows * K), seed);
  const auto Wv = integers ? random_ints(size_t(N * K), seed + 7) : random_floats(size_t(N * K), seed + 7);
  const auto w = make_weights(W, Wv, N, K);
  std::vector<double> mag;
  const auto ref = reference_gemm(W, A, w, Mrows, N, K, &mag);
  const auto out = simulate_gemm<M, Model, W>(A, w, Mrows, N, K);
  double err = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::isfinite(out[i]) ? std::fabs(out[i] - ref[i]) / std::max(1.0, mag[i]) : 1e30;
    err = std::max(err, e);
  }
  return err;
}

// ---- 2c. flash attention for prefill, block by block, as attention_prefill_kernel runs it -------------------------
// Causal attention over a paged cache (kernels.h: AttentionArgs): token t of page-table row seq[t] at positions[t]
// attends to its sequence's keys 0..positions[t], key j at cache row row(seq[t], j).
struct AttnProblem {
  int64_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v;
  int64_t page_size, pages_per_seq, cache_rows;
  float scale;
  std::vector<float> q, k, v;  // k, v: [cache_rows, n_kv_heads, head_dim(_v)], random everywhere
  // q8_0 caches (engine/kv_q8.h) when not empty: k and v then hold their dequantized values (the reference's input).
  std::vector<uint32_t> k_q8, v_q8;
  std::vector<int32_t> positions, seq, page_table;
  int64_t window = 0;        // sliding window: key j seen when position - j < window (0: none)
  std::vector<float> sinks;  // [n_heads] attention-sink logits, or empty
  int64_t row(int64_t s, int64_t j) const {
    return int64_t(page_table[size_t(s * pages_per_seq + j / page_size)]) * page_size + j % page_size;
  }
};

// Sequence i has lens[i] consecutive tokens at positions starts[i].., its pages a random permutation of the pool's
// pages 1.. (page 0 unused), so a kernel that ignores the page table or mixes sequences up gets wrong keys.
AttnProblem make_paged_attention(const std::vector<int64_t>& lens, const std::vector<int64_t>& starts, int64_t n_heads,
                                 int64_t n_kv, int64_t d, int64_t dv, int64_t page_size, uint32_t seed) {
  AttnProblem p{0, n_heads, n_kv, d, dv, page_size, 0, 0, 1.f / std::sqrt(float(d)), {}, {}, {}, {}, {}, {}, {}, {}};
  for (size_t i = 0; i < lens.size(); ++i) {
    p.n_tokens += lens[i];
    p.pages_per_seq = std::max(p.pages_per_seq, (starts[i] + lens[i] + page_size - 1) / page_size);
  }
  const int64_t n_seqs = int64_t(lens.size()), n_pages = n_seqs * p.pages_per_seq + 1;
  p.cache_rows = n_pages * page_size;
  std::vector<int32_t> pages;
  for (int64_t i = 1; i < n_pages; ++i) pages.push_back(int32_t(i));
  std::shuffle(pages.begin(), pages.end(), std::mt19937(seed + 3));
  p.page_table.assign(size_t(n_seqs * p.pages_per_seq), 0);
  for (size_t i = 0, next = 0; i < lens.size(); ++i) {
    for (int64_t pg = 0; pg < (starts[i] + lens[i] + page_size - 1) / page_size; ++pg)
      p.page_table[i * size_t(p.pages_per_seq) + size_t(pg)] = pages[next++];
    for (int64_t t = 0; t < lens[i]; ++t) {
      p.positions.push_back(int32_t(starts[i] + t));
      p.seq.push_back(int32_t(i));
    }
  }
  p.q = random_floats(size_t(p.n_tokens * n_heads * d), seed, -2.f, 2.f);
  p.k = random_floats(size_t(p.cache_rows * n_kv * d), seed + 1, -2.f, 2.f);
  p.v = random_floats(size_t(p.cache_rows * n_kv * dv), seed + 2);
  return p;
}

// The problem with q8_0 K and V caches: quantized as the kv write does, the reference reading the dequantized values.
// Rows n_kv * head_dim(_v) must be whole blocks of 32 (heads need not be: head_dim 40 splits blocks between heads).
AttnProblem with_q8_cache(AttnProblem p) {
  for (auto [x, blocks] : {std::pair{&p.k, &p.k_q8}, std::pair{&p.v, &p.v_q8}}) {
    REQUIRE(x->size() % engine::kKvQ8Block == 0);
    blocks->assign(x->size() / engine::kKvQ8Block * engine::kKvQ8Words, 0);
    engine::kv_q8_quantize(x->data(), blocks->data(), int64_t(x->size()));
    for (size_t i = 0; i < x->size(); ++i) (*x)[i] = engine::kv_q8_value(blocks->data(), int64_t(i));
  }
  return p;
}

// One sequence of n_tokens tokens from position `start`, pages of 32 positions.
AttnProblem make_attention(int64_t n_tokens, int64_t n_heads, int64_t n_kv, int64_t d, int64_t dv, int64_t start,
                           uint32_t seed) {
  return make_paged_attention({n_tokens}, {start}, n_heads, n_kv, d, dv, 32, seed);
}

std::vector<double> reference_attention(const AttnProblem& p) {
  std::vector<double> out(static_cast<size_t>(p.n_tokens * p.n_heads * p.head_dim_v));
  const int64_t group = p.n_heads / p.n_kv_heads;
  for (int64_t t = 0; t < p.n_tokens; ++t)
    for (int64_t h = 0; h < p.n_heads; ++h) {
      const int64_t g = h / group, pos = p.positions[size_t(t)], sq = p.seq[size_t(t)];
      const int64_t j_first = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
      std::vector<double> s(static_cast<size_t>(pos + 1), -INFINITY);
      double mx = p.sinks.empty() ? -1e300 : double(p.sinks[size_t(h)]);
      for (int64_t j = j_first; j <= pos; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim; ++d)
          dot += double(p.q[size_t((t * p.n_heads + h) * p.head_dim + d)]) *
                 p.k[size_t((p.row(sq, j) * p.n_kv_heads + g) * p.head_dim + d)];
        s[size_t(j)] = dot * p.scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = p.sinks.empty() ? 0.0 : std::exp(double(p.sinks[size_t(h)]) - mx);
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < p.head_dim_v; ++d) {
        double o = 0;
        for (int64_t j = 0; j <= pos; ++j)
          o += s[size_t(j)] * p.v[size_t((p.row(sq, j) * p.n_kv_heads + g) * p.head_dim_v + d)];
        out[size_t((t * p.n_heads + h) * p.head_dim_v + d)] = o / sum;
      }
    }
  return out;
}

template <class M, class Model>
std::vector<float> simulate_attention(const AttnProblem& p) {
  std::vector<float> out(size_t(p.n_tokens * p.n_heads * p.head_dim_v), std::nanf(""));
  const fa::Dims dims = fa::make_dims(int(p.head_dim), int(p.head_dim_v));
  const int chunks = dims.dvp / 16;
  struct LaneO {
    float o[fa::kMaxDvChunks][M::kC];
  };
  struct Call {
    int c;
    float a[M::kA], b[M::kB];
  };
  // Executes the recorded instructions of all lanes, in order, on the accumulators acc_of(lane, chunk).
  auto run = [&](std::vector<std::vector<Call>>& calls, auto&& acc_of) {
    for (size_t call = 0; call < calls[0].size(); ++call) {
      WaveRegs ra = test::make_regs(M::kLanes, M::kA), rb = test::make_regs(M::kLanes, M::kB),
               rc = test::make_regs(M::kLanes, M::kC);
      const int c = calls[0][call].c;
      for (int lane = 0; lane < M::kLanes; ++lane) {
        const Call& x = calls[size_t(lane)][call];
        if (x.c != c) throw std::runtime_error("lanes disagree on the matrix instruction sequence");
        std::copy(x.a, x.a + M::kA, ra[size_t(lane)].begin());
        std::copy(x.b, x.b + M::kB, rb[size_t(lane)].begin());
        const float* acc = acc_of(lane, c);
        std::copy(acc, acc + M::kC, rc[size_t(lane)].begin());
      }
      const WaveRegs d = execute<Model>(ra, rb, rc);
      for (int lane = 0; lane < M::kLanes; ++lane) std::copy(d[size_t(lane)].begin(), d[size_t(lane)].end(), acc_of(lane, c));
    }
  };
  const int64_t group = p.n_heads / p.n_kv_heads;
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += fa::kBQ)
    for (int64_t h = 0; h < p.n_heads; ++h) {
      const int64_t g = h / group;
      const int rows_valid = int(std::min<int64_t>(fa::kBQ, p.n_tokens - t0));
      std::vector<float> lds_q(static_cast<size_t>(fa::kBQ * dims.ldq)), lds_k(size_t(fa::kBKV * dims.ldk)),
          lds_v(size_t(fa::kBKV * dims.ldv)), lds_p(size_t(fa::kBQ * dims.ldp)), lds_s(size_t(fa::kBQ * dims.lds));
      float row_m[fa::kBQ], row_l[fa::kBQ], row_alpha[fa::kBQ];
      int row_pos[fa::kBQ], row_seq[fa::kBQ], key_rows[fa::kBKV];
      for (int r = 0; r < fa::kBQ; ++r) {
        row_pos[r] = r < rows_valid ? p.positions[size_t(t0 + r)] : -1;
        row_seq[r] = r < rows_valid ? p.seq[size_t(t0 + r)] : -1;
        fa::init_row(r, p.sinks.empty() ? nullptr : &p.sinks[size_t(h)], row_m, row_l);
      }
      for (int lane = 0; lane < M::kLanes; ++lane)
        fa::stage_q(lane, M::kLanes, p.q.data() + (t0 * p.n_heads + h) * p.head_dim, p.n_heads * p.head_dim,
                    rows_valid, dims, lds_q.data());
      std::vector<LaneO> acc_o(M::kLanes);
      for (auto& lo : acc_o) std::memset(lo.o, 0, sizeof lo.o);
      const int64_t k_stride = p.n_kv_heads * p.head_dim, v_stride = p.n_kv_heads * p.head_dim_v;
      // As the kernel: one pass per run of rows of one sequence.
      for (int r0 = 0; r0 < rows_valid;) {
        int max_pos = -1;
        const int r1 = fa::run_end(row_seq, row_pos, r0, rows_valid, &max_pos);
        const int64_t kv_len = max_pos + 1;
        const int32_t* pages = p.page_table.data() + int64_t(row_seq[r0]) * p.pages_per_seq;
        for (int64_t j0 = fa::run_key_begin(row_pos, r0, r1, p.window); j0 < kv_len; j0 += fa::kBKV) {
          for (int j = 0; j < fa::kBKV; ++j)
            key_rows[j] = fa::key_row(pages, p.page_size, j0 + j, kv_len, p.cache_rows);
          std::fill(lds_k.begin(), lds_k.end(), std::nanf(""));
          std::fill(lds_v.begin(), lds_v.end(), std::nanf(""));
          for (int lane = 0; lane < M::kLanes; ++lane)
            if (p.k_q8.empty())
              fa::stage_kv(lane, M::kLanes, KvF32{p.k.data()}, g * p.head_dim, k_stride, KvF32{p.v.data()},
                           g * p.head_dim_v, v_stride, key_rows, dims, lds_k.data(), lds_v.data());
            else  // the q8_0 accessor on the blocks (as the kernel's KvQ8 instantiation)
              fa::stage_kv(lane, M::kLanes, KvQ8{p.k_q8.data()}, g * p.head_dim, k_stride, KvQ8{p.v_q8.data()},
                           g * p.head_dim_v, v_stride, key_rows, dims, lds_k.data(), lds_v.data());
          // S = Q K^T
          std::vector<std::vector<float>> acc_s(M::kLanes, std::vector<float>(M::kC, 0.f));
          std::vector<std::vector<Call>> calls(M::kLanes);
          for (int lane = 0; lane < M::kLanes; ++lane)
            fa::for_each_score_mma<M>(lane, lds_q.data(), lds_k.data(), dims, [&](const float* af, const float* bf) {
              Call c{0, {}, {}};
              std::copy(af, af + M::kA, c.a);
              std::copy(bf, bf + M::kB, c.b);
              calls[size_t(lane)].push_back(c);
            });
          run(calls, [&](int lane, int) { return acc_s[size_t(lane)].data(); });
          for (int lane = 0; lane < M::kLanes; ++lane)
            fa::store_scores<M>(lane, acc_s[size_t(lane)].data(), p.scale, j0, row_pos, r0, r1, dims, lds_s.data(),
                                p.window);
          for (int r = 0; r < fa::kBQ; ++r)
            fa::softmax_row(r, lds_s.data(), dims, lds_p.data(), row_m, row_l, row_alpha);
          for (int lane = 0; lane < M::kLanes; ++lane) fa::rescale_o<M>(lane, chunks, acc_o[size_t(lane)].o, row_alpha);
          // O += P V
          std::vector<std::vector<Call>> pv(M::kLanes);
          for (int lane = 0; lane < M::kLanes; ++lane)
            fa::for_each_pv_mma<M>(lane, lds_p.data(), lds_v.data(), dims, [&](int c, const float* af, const float* bf) {
              Call x{c, {}, {}};
              std::copy(af, af + M::kA, x.a);
              std::copy(bf, bf + M::kB, x.b);
              pv[size_t(lane)].push_back(x);
            });
          run(pv, [&](int lane, int c) { return acc_o[size_t(lane)].o[c]; });
        }
        r0 = r1;
      }
      for (int lane = 0; lane < M::kLanes; ++lane)
        fa::store_out<M>(lane, chunks, acc_o[size_t(lane)].o, row_l, out.data() + (t0 * p.n_heads + h) * p.head_dim_v,
                         p.n_heads * p.head_dim_v, rows_valid, dims);
    }
  return out;
}

template <class M, class Model>
double attention_error(const AttnProblem& p) {
  const auto ref = reference_attention(p);
  const auto out = simulate_attention<M, Model>(p);
  double err = 0;
  for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::isfinite(out[i]) ? std::fabs(out[i] - ref[i]) : 1e30);
  return err;
}

}  // namespace

TEST_CASE("the documented layout models are layouts: every register holds one element") {
  check_model_is_a_layout<Mfma16Model>(1);
  check_model_is_a_layout<Wmma16Model>(2);  // A and B replicated in both half-waves
  check_model_is_a_layout<Nv16Model>(1);
}

TEST_CASE("mma_layout.h's per-lane index maps agree with the documented layouts") {
  SUBCASE("MFMA v_mfma_f32_16x16x16f16, wave64 (gfx90a, gfx942)") { check_maps_match_model<MmaMfma16, Mfma16Model>(); }
  SUBCASE("WMMA v_wmma_f32_16x16x16_f16, wave32 (gfx1100-gfx1103)") { check_maps_match_model<MmaWmma16, Wmma16Model>(); }
  SUBCASE("NVIDIA 2x mma.sync.m16n8k16 (sm_80+)") { check_maps_match_model<MmaNv16, Nv16Model>(); }
}

TEST_CASE("one 16x16x16 tile through the kernels' fragment loads (mk x nk and mk x kn) is exact") {
  for (bool kn : {false, true}) {
    CAPTURE(kn);
    CHECK(tile_max_error<MmaMfma16, Mfma16Model>(kn, 11) == 0.f);
    CHECK(tile_max_error<MmaWmma16, Wmma16Model>(kn, 12) == 0.f);
    CHECK(tile_max_error<MmaNv16, Nv16Model>(kn, 13) == 0.f);
  }
}

TEST_CASE("the prefill GEMM's tile code computes A W^T exactly on integer data, odd sizes") {
  // Sizes that leave partial tiles in every direction: M and N not multiples of 64, K not a multiple of 32 (nor 16).
  struct Size {
    int64_t m, n, k;
  };
  for (const Size sz : {Size{37, 45, 83}, Size{70, 129, 48}, Size{1, 3, 17}}) {
    const int64_t m = sz.m, n = sz.n, k = sz.k;
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    CHECK(gemm_error<MmaMfma16, Mfma16Model, WType::F32>(m, n, k, 21, true) == 0.0);
    CHECK(gemm_error<MmaWmma16, Wmma16Model, WType::F32>(m, n, k, 22, true) == 0.0);
    CHECK(gemm_error<MmaNv16, Nv16Model, WType::F32>(m, n, k, 23, true) == 0.0);
  }
}

TEST_CASE("the prefill GEMM agrees with decode semantics (CPU codecs) for every weight format") {
  // Reference: out[m][n] = dot(model::dequantize_row(W row n), A row m) -- what matvec and the CPU backend compute.
  constexpr double kTol = 1e-5;
  const int64_t M = 19, N = 67;
#define GRETA_GEMM_FORMAT_CASE(T)                                                                        \
  SUBCASE(#T) {                                                                                          \
    const int64_t K = block_elems(WType::T) == 256 ? 512 : (block_elems(WType::T) == 32 ? 96 : 75);     \
    CHECK(gemm_error<MmaMfma16, Mfma16Model, WType::T>(M, N, K, 31, false) < kTol);                     \
    CHECK(gemm_error<MmaWmma16, Wmma16Model, WType::T>(M, N, K, 32, false) < kTol);                     \
    CHECK(gemm_error<MmaNv16, Nv16Model, WType::T>(M, N, K, 33, false) < kTol);                         \
  }
  GRETA_HIP_FOR_EACH_WTYPE(GRETA_GEMM_FORMAT_CASE)
#undef GRETA_GEMM_FORMAT_CASE
}

TEST_CASE("flash attention's tile code matches causal attention (GQA, odd head sizes, partial blocks)") {
  // 21 tokens: one full block of 16 query rows and one of 5; head_dim 40 and head_dim_v 24 pad to 48 and 32.
  const AttnProblem p = make_attention(21, 4, 2, 40, 24, 7, 41);
  CHECK(attention_error<MmaMfma16, Mfma16Model>(p) < 1e-5);
  CHECK(attention_error<MmaWmma16, Wmma16Model>(p) < 1e-5);
  CHECK(attention_error<MmaNv16, Nv16Model>(p) < 1e-5);
  const AttnProblem q = make_attention(33, 2, 1, 64, 64, 0, 42);  // prompt from position 0, head_dim 64
  CHECK(attention_error<MmaMfma16, Mfma16Model>(q) < 1e-5);
  CHECK(attention_error<MmaWmma16, Wmma16Model>(q) < 1e-5);
}

TEST_CASE("flash attention's tile code over a paged cache: query tiles spanning several sequences") {
  // Tiles of 16 rows holding the end of one sequence's chunk and the start of the next, decode tokens of one-token
  // sequences mixed with prefill chunks, pages of 8 and 12 positions (not multiples of the 16-key tile), scrambled.
  const AttnProblem mixed = make_paged_attention({5, 1, 20, 1, 1, 9}, {40, 77, 3, 0, 130, 16}, 4, 2, 40, 24, 8, 61);
  CHECK(attention_error<MmaMfma16, Mfma16Model>(mixed) < 1e-5);
  CHECK(attention_error<MmaWmma16, Wmma16Model>(mixed) < 1e-5);
  CHECK(attention_error<MmaNv16, Nv16Model>(mixed) < 1e-5);
  std::vector<int64_t> lens(19, 1), starts;  // 19 decode tokens: two tiles of one-row runs
  for (int64_t i = 0; i < 19; ++i) starts.push_back((i * 29) % 100);
  const AttnProblem decode = make_paged_attention(lens, starts, 2, 1, 64, 64, 12, 62);
  CHECK(attention_error<MmaMfma16, Mfma16Model>(decode) < 1e-5);
  CHECK(attention_error<MmaNv16, Nv16Model>(decode) < 1e-5);
}

TEST_CASE("flash attention's tile code with a sliding window and attention sinks (gpt-oss, gemma3)") {
  // Windows shorter than a key tile, not multiples of it, and longer than the keys; prompts starting past the window
  // (key tiles wholly before every row's window are skipped: run_key_begin); runs of several sequences in one tile;
  // sinks that dominate some rows (sink logits up to 4 against scores of about +-2).
  struct Case {
    std::vector<int64_t> lens, starts;
    int64_t window;
    bool sinks;
  };
  const Case cases[] = {{{40}, {0}, 5, false},   {{40}, {70}, 21, true},           {{33}, {7}, 1, true},
                        {{21}, {3}, 4096, true}, {{5, 1, 20, 9}, {40, 77, 3, 16}, 12, true},
                        {{30}, {100}, 0, true}};
  uint32_t seed = 71;
  for (const Case& c : cases) {
    CAPTURE(c.window);
    CAPTURE(c.sinks);
    AttnProblem p = make_paged_attention(c.lens, c.starts, 4, 2, 40, 24, 8, seed++);
    p.window = c.window;
    if (c.sinks) p.sinks = random_floats(size_t(p.n_heads), seed++, -1.f, 4.f);
    CHECK(attention_error<MmaMfma16, Mfma16Model>(p) < 1e-5);
    CHECK(attention_error<MmaWmma16, Wmma16Model>(p) < 1e-5);
    CHECK(attention_error<MmaNv16, Nv16Model>(p) < 1e-5);
  }
  // The key loop's first tile: the tile of the run's lowest visible key.
  const int pos[4] = {40, 41, 44, 45};
  CHECK(fa::run_key_begin(pos, 0, 4, 0) == 0);
  CHECK(fa::run_key_begin(pos, 0, 4, 8) == 32);   // first key 33
  CHECK(fa::run_key_begin(pos, 0, 4, 9) == 32);   // 32
  CHECK(fa::run_key_begin(pos, 0, 4, 10) == 16);  // 31
  CHECK(fa::run_key_begin(pos, 1, 4, 10) == 32);  // 32
  CHECK(fa::run_key_begin(pos, 0, 4, 41) == 0);
}

TEST_CASE("flash attention's tile code over a q8_0 cache: blocks dequantized while staging, heads splitting blocks") {
  // head_dim 40 and head_dim_v 24 with 4 KV heads: rows of 160 and 96 values (5 and 3 blocks), most heads' slices
  // start inside a block; GQA 8/4, several sequences on scrambled pages. The reference reads the dequantized cache,
  // so the tile code must stage exactly d * q from the right block and byte.
  const AttnProblem mixed =
      with_q8_cache(make_paged_attention({5, 1, 20, 1, 1, 9}, {40, 77, 3, 0, 130, 16}, 8, 4, 40, 24, 8, 71));
  CHECK(attention_error<MmaMfma16, Mfma16Model>(mixed) < 1e-5);
  CHECK(attention_error<MmaWmma16, Wmma16Model>(mixed) < 1e-5);
  CHECK(attention_error<MmaNv16, Nv16Model>(mixed) < 1e-5);
  const AttnProblem one = with_q8_cache(make_attention(33, 2, 1, 64, 64, 5, 72));  // head-aligned blocks
  CHECK(attention_error<MmaNv16, Nv16Model>(one) < 1e-5);
  // The check can fail: K blocks with their first two words swapped (elements 0..3 and 4..7 exchanged).
  AttnProblem wrong = mixed;
  for (size_t i = 0; i + 1 < wrong.k_q8.size(); i += engine::kKvQ8Words) std::swap(wrong.k_q8[i], wrong.k_q8[i + 1]);
  CHECK(attention_error<MmaNv16, Nv16Model>(wrong) > 1e-3);
}

TEST_CASE("wrong layouts are caught: the checks above fail for each mutant") {
  SUBCASE("MFMA with A transposed") {
    CHECK(tile_max_error<MfmaATransposed, Mfma16Model>(false, 51) > 0.f);
    CHECK(gemm_error<MfmaATransposed, Mfma16Model, WType::F32>(37, 45, 83, 52, true) > 0.0);
  }
  SUBCASE("MFMA with the result stored transposed") {
    CHECK(tile_max_error<MfmaDTransposed, Mfma16Model>(true, 53) > 0.f);
    CHECK(gemm_error<MfmaDTransposed, Mfma16Model, WType::F32>(37, 45, 83, 54, true) > 0.0);
    CHECK(attention_error<MfmaDTransposed, Mfma16Model>(make_attention(21, 4, 2, 40, 24, 7, 55)) > 1e-3);
  }
  SUBCASE("WMMA with contiguous instead of interleaved accumulator rows") {
    CHECK(tile_max_error<WmmaContiguousD, Wmma16Model>(false, 56) > 0.f);
    CHECK(gemm_error<WmmaContiguousD, Wmma16Model, WType::Q8_0>(19, 67, 96, 57, false) > 1e-3);
  }
  SUBCASE("WMMA whose half-waves hold different A rows") {
    auto run = [] { return tile_max_error<WmmaNoReplica, Wmma16Model>(false, 58); };
    CHECK_THROWS_WITH(run(), doctest::Contains("replicated A"));
  }
  SUBCASE("NVIDIA with the two n8 halves of B swapped") {
    CHECK(tile_max_error<NvBHalvesSwapped, Nv16Model>(false, 59) > 0.f);
    CHECK(gemm_error<NvBHalvesSwapped, Nv16Model, WType::F32>(37, 45, 83, 60, true) > 0.0);
  }
}

TEST_CASE("the GEMM's per-row fp16 scale is a power of two that puts the row maximum in [2^13, 2^14)") {
  for (float amax : {1e-30f, 3e-8f, 0.37f, 1.f, 5.5f, 65504.f, 1e20f}) {
    CAPTURE(amax);
    const float s = gemm::row_scale_for(amax);
    int e = 0;
    CHECK(std::frexp(s, &e) == 0.5f);  // a power of two: scaling and unscaling are exact
    CHECK(amax * s >= 8192.f);
    CHECK(amax * s < 16384.f);
  }
  CHECK(gemm::row_scale_for(0.f) == 1.f);
  CHECK(gemm::row_scale_for(std::numeric_limits<float>::infinity()) == 1.f);
  CHECK(gemm::row_scale_for(std::nanf("")) == 1.f);
}
