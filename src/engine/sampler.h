// Token sampling with llama.cpp's default chain, deterministic for a given seed on every machine, thread count and
// backend that produces the same logits (the RNG and every step are specified here, nothing comes from <random>'s
// implementation-defined distributions).
//
// Order of operations for one token (as llama.cpp's default sampler chain):
//   1. penalties over the last repeat_last_n accepted tokens (count c > 0 of token i):
//        logit_i = logit_i > 0 ? logit_i / repeat_penalty : logit_i * repeat_penalty
//        logit_i -= c * frequency_penalty + presence_penalty
//   2. temperature <= 0: greedy, return the highest logit (lowest id on ties). Otherwise:
//   3. top-k: keep the k highest logits (ties broken by lower id)
//   4. top-p: softmax over the survivors; keep the shortest prefix (by descending probability) whose mass >= top_p
//   5. min-p: keep tokens whose probability >= min_p * the highest probability
//   6. temperature: divide the surviving logits by it
//   7. softmax (fp64) and draw: u = uniform [0, 1) from xoshiro256** seeded by splitmix64(seed); walking the
//      survivors in descending order, pick the first token whose cumulative probability exceeds u
// At least one token always survives each filter.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace greta::engine {

using TokenId = int32_t;

struct SamplerParams {
  float temperature = 0.8f;       // <= 0: greedy
  int32_t top_k = 40;             // <= 0: off
  float top_p = 0.95f;            // 1: off
  float min_p = 0.05f;            // 0: off
  float repeat_penalty = 1.0f;    // 1: off
  int32_t repeat_last_n = 64;     // tokens the penalties look back over; 0: off, -1: the whole history
  float frequency_penalty = 0.f;  // 0: off
  float presence_penalty = 0.f;   // 0: off
  uint64_t seed = 0x5EED;

  static SamplerParams greedy() {
    SamplerParams p;
    p.temperature = 0.f;
    return p;
  }
};

// xoshiro256** (Blackman & Vigna), seeded through splitmix64: a fixed, portable sequence for a given seed.
class Rng {
public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits

private:
  uint64_t s_[4];
};

class Sampler {
public:
  // Throws greta::Error for out-of-range parameters (negative penalties, top_p outside (0, 1], NaN temperature...).
  explicit Sampler(const SamplerParams& params);

  // Picks the next token from one row of logits (vocab floats). Does not record it: call accept().
  // Throws greta::Error if a logit is NaN.
  TokenId sample(std::span<const float> logits);
  // Records a token in the penalty history (prompt tokens too, as llama.cpp does).
  void accept(TokenId token);
  // Forgets the history and restarts the RNG from the seed.
  void reset();

  const SamplerParams& params() const { return params_; }

private:
  struct Candidate {
    TokenId id;
    double logit;
  };
  // The penalized logits of the tokens in the history window (id, value), in id order; the rest keep their logits.
  void penalized_logits(size_t vocab);
  // Candidates for the filters: every token by descending logit (ties: lower id first), or with top-k only the k best
  // (found in one pass over the logits with a k-heap, most tokens rejected by one comparison, instead of a partial
  // sort of a copy of every logit: a server samples for every running sequence each step).
  void gather_candidates(std::span<const float> logits, std::vector<Candidate>& c);

  SamplerParams params_;
  Rng rng_;
  std::vector<TokenId> history_;  // newest last; at most repeat_last_n kept when it is >= 0
  std::vector<std::pair<TokenId, double>> penalized_;  // scratch: penalized_logits()'s result
  std::vector<Candidate> candidates_;                  // scratch
};

// The index of the largest value (the lowest index on ties).
TokenId argmax(std::span<const float> logits);

}  // namespace greta::engine
