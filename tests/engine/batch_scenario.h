// A scripted many-sequence run shared by the batching tests of every backend: eight sequences with different prompt
// lengths join at different steps, decode together, finish at different steps; one forks another after its prompt,
// one starts from another's prompt prefix (shared pages), and a finished sequence's pages are reused by a later one.
// Every logits row a sequence receives is recorded with its position, so each can be compared with the same
// sequence run alone (prefill of its whole history, all logits).
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"

namespace greta::test {

struct ScenarioSequence {
  std::vector<engine::TokenId> history;           // every token the sequence held at its end
  std::map<int64_t, std::vector<float>> logits;  // position of the token -> logits after it
  int64_t reused = 0;                            // prompt tokens taken from another sequence's pages
};

// Runs the scenario on `e` (max_seqs >= 4, ctx >= 96 expected; max_batch may be small: steps then split). Decode
// tokens are the argmax of each sequence's logits, so the run is deterministic for a backend.
inline std::vector<ScenarioSequence> run_batch_scenario(engine::Engine& e, uint32_t seed = 7) {
  using engine::LogitsWanted;
  using engine::SeqId;
  using engine::StepEntry;
  using engine::TokenId;
  std::mt19937 rng(seed);
  const auto random_prompt = [&](size_t n) {
    std::vector<TokenId> p(n);
    for (auto& t : p) t = TokenId(1 + rng() % uint32_t(std::min<int64_t>(e.vocab_size() - 1, 500)));
    return p;
  };
  // Sequence k: prompt length, the step it joins at, the decode tokens it generates.
  struct Plan {
    size_t prompt;
    int join, decode;
  };
  const Plan plans[] = {{37, 0, 9}, {70, 0, 4}, {5, 1, 12}, {1, 2, 6}, {33, 3, 3}, {0, 4, 5} /* fork of 0 */,
                        {0, 3, 7} /* prefix of 1 */, {12, 8, 4} /* joins after others finished */};
  const size_t n = std::size(plans);
  std::vector<ScenarioSequence> out(n);
  std::vector<SeqId> id(n, -1);
  std::vector<std::vector<TokenId>> pending(n);  // tokens the next step feeds
  std::vector<int> left(n, 0);
  std::vector<bool> done(n, false);
  for (int step = 0; step < 40; ++step) {
    for (size_t k = 0; k < n; ++k) {
      if (plans[k].join != step || id[k] >= 0) continue;
      if (k == 5) {  // fork sequence 0 (its prompt is in the cache): the fork recomputes its last partial page
        if (id[0] < 0) continue;
        id[k] = e.fork_sequence(id[0]);
        out[k].history = e.sequence_tokens(id[k]);
      } else if (k == 6) {  // sequence 1's prompt and more: its full pages are shared, the rest computed
        std::vector<TokenId> prompt = out[1].history;
        prompt.resize(std::min<size_t>(prompt.size(), 70));
        const auto extra = random_prompt(9);
        prompt.insert(prompt.end(), extra.begin(), extra.end());
        const auto [seq, reused] = e.new_sequence_with_prefix(prompt);
        id[k] = seq;
        out[k].reused = reused;
        out[k].history.assign(prompt.begin(), prompt.begin() + reused);
        pending[k].assign(prompt.begin() + reused, prompt.end());
      } else {
        id[k] = e.new_sequence();
        pending[k] = random_prompt(plans[k].prompt);
      }
      left[k] = plans[k].decode;
    }
    std::vector<StepEntry> entries;
    std::vector<size_t> who;
    for (size_t k = 0; k < n; ++k) {
      if (id[k] < 0 || done[k]) continue;
      if (pending[k].empty() && !(k == 5 && out[k].logits.empty())) continue;
      entries.push_back({id[k], pending[k], LogitsWanted::Last});
      who.push_back(k);
    }
    if (entries.empty()) {
      if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
      continue;
    }
    const engine::StepLogits& logits = e.step(entries);
    for (size_t i = 0; i < who.size(); ++i) {
      const size_t k = who[i];
      out[k].history.insert(out[k].history.end(), pending[k].begin(), pending[k].end());
      const auto row = logits.row(i);
      out[k].logits[int64_t(out[k].history.size()) - 1].assign(row.begin(), row.end());
      pending[k].clear();
      if (left[k]-- > 0) {
        pending[k].push_back(engine::argmax(row));
      } else {
        done[k] = true;
        e.release_sequence(id[k]);
      }
    }
  }
  return out;
}

}  // namespace greta::test
