// Many sequences in one engine: the KV page pool's bookkeeping (churn leaves it exactly as it started, budgets,
// sharing), batched steps equal to each sequence run alone (bit-identical on the CPU backend, for every model),
// forks and prefix reuse, and the errors a caller gets.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "batch_scenario.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/batch.h"
#include "golden_run.h"
#include "test_util.h"

using namespace greta;
using namespace greta::engine;

namespace {

Engine open_engine(const std::string& path, EngineOptions options) {
  return Engine::open(path, std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{2}), options);
}

bool bit_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Every page free, every reference count zero but the sink's.
void check_pool_empty(const KvCache& kv) {
  CHECK(kv.used_pages() == 0);
  CHECK(kv.live_sequences() == 0);
  CHECK(kv.available_pages() == kv.max_pages() - 1);
  CHECK(kv.page_refs(0) == 1);
  for (int32_t p = 1; p < kv.capacity(); ++p) REQUIRE(kv.page_refs(p) == 0);
}

}  // namespace

TEST_CASE("kv cache: 1000 sequences of churn (start, grow, fork, truncate, forget, finish) leave the pool as it "
          "started") {
  KvCache kv(4, 3, 200);
  std::mt19937 rng(11);
  std::vector<SeqId> live;
  int64_t refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t action = rng() % 10;
    if (live.empty() || action < 3) {
      live.push_back(kv.create());
    } else if (action < 6) {  // grow one
      const SeqId s = live[rng() % live.size()];
      if (!kv.extend(s, kv.length(s) + 1 + int64_t(rng() % 9))) ++refused;
    } else if (action < 7) {  // fork one at a random length
      const SeqId s = live[rng() % live.size()];
      const SeqId f = kv.fork(s, int64_t(rng() % uint32_t(kv.length(s) + 1)));
      CHECK(kv.length(f) % 4 == 0);
      for (size_t p = 0; p < kv.pages(f).size(); ++p) CHECK(kv.pages(f)[p] == kv.pages(s)[p]);
      live.push_back(f);
    } else if (action < 8) {  // truncate one
      const SeqId s = live[rng() % live.size()];
      const int64_t kept = kv.truncate(s, int64_t(rng() % uint32_t(kv.length(s) + 1)));
      CHECK(kept == kv.length(s));
    } else if (action < 9 && (rng() & 1)) {  // a sliding window moves on: give up the pages before it
      const SeqId s = live[rng() % live.size()];
      const int64_t before = int64_t(rng() % uint32_t(kv.length(s) + 1));
      kv.forget_before(s, before);
      CHECK(kv.kept_from(s) >= before - before % 4);
      for (int64_t p = 0; p < kv.kept_from(s) / 4; ++p) CHECK(kv.pages(s)[size_t(p)] == 0);
    } else {  // finish one
      const size_t at = rng() % live.size();
      kv.release(live[at]);
      live.erase(live.begin() + ptrdiff_t(at));
    }
    // Invariants: every page a live sequence holds is counted once per holder; used = pages with a holder.
    std::vector<int32_t> holders(size_t(kv.capacity()), 0);
    for (SeqId s : live) {
      CHECK(int64_t(kv.pages(s).size()) == kv.pages_for(kv.length(s)));
      for (int32_t p : kv.pages(s)) ++holders[size_t(p)];
    }
    int64_t used = 0;
    for (int32_t p = 1; p < kv.capacity(); ++p) {
      REQUIRE(holders[size_t(p)] == kv.page_refs(p));
      used += holders[size_t(p)] > 0;
    }
    REQUIRE(used == kv.used_pages());
  }
  CHECK(refused > 0);  // the budget was reached and refused, not overrun
  CHECK(kv.capacity() == 200);
  for (SeqId s : live) kv.release(s);
  check_pool_empty(kv);
}

TEST_CASE("kv cache: a shared page is never written again; growth is geometric and bounded by the budget") {
  KvCache kv(4, 3, 9);  // the sink and 8 pages
  const SeqId a = kv.create();
  REQUIRE(kv.extend(a, 10));  // 3 pages
  CHECK(kv.capacity() >= 4);
  const SeqId b = kv.fork(a, 10);  // shares the 2 full pages only
  CHECK(kv.length(b) == 8);
  CHECK(kv.page_refs(kv.pages(a)[0]) == 2);
  CHECK(kv.page_refs(kv.pages(a)[2]) == 1);
  CHECK(kv.truncate(a, 6) == 4);  // position 6 is on a shared page: a gives it up and recomputes from 4
  CHECK(kv.page_refs(kv.pages(b)[1]) == 1);
  REQUIRE(kv.extend(b, 32));  // 8 pages: b holds page 0's neighbours and 6 new ones
  CHECK_FALSE(kv.extend(a, 9));  // needs 2 more: the budget has 8 - 8 = 0 left... a holds 1 shared
  CHECK(kv.length(a) == 4);      // nothing changed by the refusal
  CHECK(kv.capacity() == 9);
  kv.release(a);
  kv.release(b);
  check_pool_empty(kv);
}

TEST_CASE("batched steps equal each sequence run alone, bit for bit, for every model (CPU backend)") {
  int models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::shared_path("models"))) {
    if (entry.path().extension() != ".gguf") continue;
    const std::string path = entry.path().string();
    CAPTURE(path);
    ++models;
    // f16 KV (the default) with passes of 64 and of 16 tokens; q8_0 KV where the model's rows allow it.
    const bool q8 = test::kv_types_for(path).back() == ElemType::Q8_0;
    for (const auto& [max_batch, kv] : {std::pair{int64_t(64), ElemType::F16}, std::pair{int64_t(16), ElemType::F16},
                                        std::pair{int64_t(64), ElemType::Q8_0}}) {
      if (kv == ElemType::Q8_0 && !q8) continue;
      CAPTURE(max_batch);
      const std::string kv_name = elem_type_name(kv);
      CAPTURE(kv_name);
      Engine batched = open_engine(path, {.ctx = 128, .max_batch = max_batch, .max_seqs = 6, .kv_type = kv});
      const auto seqs = test::run_batch_scenario(batched);
      check_pool_empty(batched.kv_cache());
      Engine alone = open_engine(path, {.ctx = 128, .max_batch = 128, .max_seqs = 1, .kv_type = kv});
      CHECK(seqs[6].reused == 64);  // two full pages of sequence 1's prompt
      for (size_t k = 0; k < seqs.size(); ++k) {
        CAPTURE(k);
        alone.reset();
        const std::vector<float> all = alone.prefill_all_logits(seqs[k].history);
        const size_t vocab = size_t(alone.vocab_size());
        REQUIRE(!seqs[k].logits.empty());
        for (const auto& [pos, row] : seqs[k].logits)
          CHECK_MESSAGE(bit_equal(row, std::span(all).subspan(size_t(pos) * vocab, vocab)), "position ", pos);
      }
    }
  }
  CHECK(models >= 22);
}

TEST_CASE("engine: forks and prefix reuse share pages; the errors a batch caller gets") {
  const std::string path = test::shared_path("models/stories260K.gguf");
  Engine e = open_engine(path, {.ctx = 96, .max_batch = 32, .max_seqs = 4});
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 300, 301, 302, 303, 304,
                                       305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320,
                                       321, 322, 323};
  const SeqId a = e.new_sequence();
  const auto row = e.step({{a, prompt}}).row(0);
  const std::vector<float> after(row.begin(), row.end());
  const int64_t used = e.kv_cache().used_pages();
  CHECK(used == 2);  // 35 positions
  const SeqId f = e.fork_sequence(a);
  CHECK(e.kv_cache().used_pages() == used);  // the full first page is shared; the rest is recomputed by f
  CHECK(e.sequence_tokens(f) == prompt);
  CHECK(bit_equal(e.step({{f, {}}}).row(0), after));
  CHECK(e.kv_cache().used_pages() == used + 1);

  std::vector<TokenId> longer = prompt;
  longer.push_back(400);
  const auto [p, reused] = e.new_sequence_with_prefix(longer);
  CHECK(reused == 32);
  CHECK(e.kv_cache().page_refs(e.kv_cache().pages(a)[0]) == 3);
  const auto p_row = e.step({{p, std::span(longer).subspan(32)}}).row(0);
  e.step({{a, std::vector<TokenId>{400}}});
  CHECK(bit_equal(p_row, e.step({{f, std::vector<TokenId>{400}}}).row(0)));

  // Errors: nothing is appended by a step that fails.
  const size_t before = e.sequence_tokens(a).size();
  CHECK_THROWS_WITH_AS(e.step({{a, std::vector<TokenId>{9999}}}), doctest::Contains("outside the vocabulary"), Error);
  const std::vector<TokenId> one = {5};
  CHECK_THROWS_WITH_AS(e.step({{a, one}, {a, one}}), doctest::Contains("appears twice"), Error);
  const std::vector<TokenId> too_many(size_t(96 - before + 1), 5);
  CHECK_THROWS_WITH_AS(e.step({{a, too_many}}), doctest::Contains("context full"), Error);
  CHECK_THROWS_WITH_AS(e.step({{a, {}}}), doctest::Contains("no tokens"), Error);
  CHECK(e.sequence_tokens(a).size() == before);
  for (SeqId s : {a, f, p}) e.release_sequence(s);
  check_pool_empty(e.kv_cache());

  // A budget of 4 pages: two 60-token sequences fit, a third does not, with a clear error; freeing one makes room.
  const uint64_t per_page = e.kv_bytes_per_page();
  Engine small = open_engine(path, {.ctx = 96, .max_batch = 32, .max_seqs = 4, .kv_budget = 5 * per_page});
  const std::vector<TokenId> sixty(60, 300);
  const SeqId x = small.new_sequence(), y = small.new_sequence(), z = small.new_sequence();
  small.step({{x, sixty}, {y, sixty}});
  CHECK(small.kv_positions_available() == 0);
  CHECK_THROWS_WITH_AS(small.step({{z, one}}), doctest::Contains("KV cache full"), Error);
  small.release_sequence(x);
  CHECK(small.step({{z, one}}).row(0).size() == size_t(small.vocab_size()));
  CHECK_THROWS_WITH_AS(open_engine(path, {.ctx = 4096, .kv_budget = 5 * per_page}), doctest::Contains("context"), Error);
}

TEST_CASE("run_batch: continuous batching gives each request what it gets alone; waits for pages; fails alone") {
  const std::string path = test::shared_path("models/stories260K-q8_0.gguf");
  std::vector<BatchRequest> requests;
  std::mt19937 rng(5);
  const std::vector<TokenId> shared_prefix = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 300, 301, 302, 303,
                                              304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317,
                                              318, 319, 320, 321, 322};
  for (int i = 0; i < 10; ++i) {
    BatchRequest r;
    if (i % 3 == 0) r.prompt = shared_prefix;  // a shared system prompt
    for (uint32_t k = 0, n = 1 + rng() % 20; k < n; ++k) r.prompt.push_back(TokenId(2 + rng() % 500));
    r.options.max_tokens = int64_t(rng() % 24);
    r.options.sampling = i % 2 ? SamplerParams::greedy() : SamplerParams{.temperature = 0.8f, .seed = uint64_t(i)};
    requests.push_back(std::move(r));
  }
  requests.push_back({{}, {}});  // empty prompt: fails alone
  BatchRequest huge;
  huge.prompt.assign(100, 300);  // more than the context of 96
  requests.push_back(huge);

  Engine alone = open_engine(path, {.ctx = 96, .max_batch = 32});
  const uint64_t per_page = alone.kv_bytes_per_page();
  // 9 pages: three sequences of up to 96 positions cannot all run at once; admission waits.
  Engine e = open_engine(path, {.ctx = 96, .max_batch = 32, .max_seqs = 3, .kv_budget = 10 * per_page});
  std::vector<size_t> order;
  const auto results = run_batch(e, requests, {.parallel = 3, .on_done = [&](size_t i, const BatchResult&) {
                                                  order.push_back(i);
                                                }});
  REQUIRE(results.size() == requests.size());
  CHECK(order.size() == requests.size());
  CHECK(results[10].error.find("empty") != std::string::npos);
  CHECK(results[11].error.find("context") != std::string::npos);
  int64_t reused = 0;
  for (size_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    REQUIRE(results[i].error.empty());
    alone.reset();
    const GenerateResult want = alone.generate(requests[i].prompt, requests[i].options);
    CHECK(results[i].result.tokens == want.tokens);
    CHECK(results[i].result.stop == want.stop);
    reused += results[i].reused_tokens;
  }
  CHECK(reused >= 32);  // the shared prompt's first page was computed once while its sequences overlapped
  check_pool_empty(e.kv_cache());
}

TEST_CASE("kv cache: grow() sizes the pool up front, within the budget, and pages are still taken lowest first") {
  KvCache kv(4, 3, 12);
  kv.grow(8);
  CHECK(kv.capacity() == 8);
  kv.grow(100);
  CHECK(kv.capacity() == 12);  // the budget
  kv.grow(5);
  CHECK(kv.capacity() == 12);  // never shrinks
  const SeqId s = kv.create();
  REQUIRE(kv.extend(s, 12));
  CHECK(std::vector<int32_t>(kv.pages(s).begin(), kv.pages(s).end()) == std::vector<int32_t>{1, 2, 3});
  kv.release(s);
  check_pool_empty(kv);
}

TEST_CASE("engine: a pass may hold more tokens than one sequence's context (max_seqs of them)") {
  const std::string path = test::shared_path("models/stories260K.gguf");
  // The pass size is capped by max_seqs contexts, not by one: 4 prompts of 30 at ctx 32 in one pass of 120 tokens.
  CHECK(open_engine(path, {.ctx = 32, .max_batch = 128, .max_seqs = 1}).options().max_batch == 32);
  CHECK(open_engine(path, {.ctx = 32, .max_batch = 128, .max_seqs = 3}).options().max_batch == 96);
  Engine e = open_engine(path, {.ctx = 32, .max_batch = 128, .max_seqs = 4});
  CHECK(e.options().max_batch == 128);
  std::mt19937 rng(5);
  std::vector<std::vector<TokenId>> prompts(4);
  std::vector<StepEntry> entries;
  for (auto& p : prompts) {
    for (int i = 0; i < 30; ++i) p.push_back(TokenId(1 + rng() % uint32_t(e.vocab_size() - 1)));
    entries.push_back({e.new_sequence(), p, LogitsWanted::Last});
  }
  const StepLogits& out = e.step(entries);
  Engine alone = open_engine(path, {.ctx = 32, .max_batch = 32, .max_seqs = 1});
  const size_t vocab = size_t(alone.vocab_size());
  for (size_t k = 0; k < prompts.size(); ++k) {
    CAPTURE(k);
    alone.reset();
    const std::vector<float> all = alone.prefill_all_logits(prompts[k]);
    CHECK(bit_equal(out.row(k), std::span(all).subspan(29 * vocab, vocab)));
  }
}
