#include "bench_batched.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "generation.h"

namespace greta::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BatchedRow {
  int64_t npp, ntg, b;
  double t_pp = 0, t_tg = 0;
  int64_t n_kv() const { return b * (npp + ntg); }
  double s_pp() const { return t_pp > 0 ? double(b * npp) / t_pp : 0; }
  double s_tg() const { return t_tg > 0 ? double(b * ntg) / t_tg : 0; }
  double s() const { return t_pp + t_tg > 0 ? double(n_kv()) / (t_pp + t_tg) : 0; }
};

// One measurement: B fresh sequences, one step with every prompt (the engine splits it into passes), then ntg
// decode steps of B tokens. Returns the two times.
BatchedRow measure(engine::Engine& e, int64_t npp, int64_t ntg, int64_t b, engine::Rng& rng) {
  BatchedRow row{npp, ntg, b};
  std::vector<engine::SeqId> seqs;
  auto prompts = std::vector<std::vector<engine::TokenId>>(static_cast<size_t>(b));
  for (auto& p : prompts) {
    p.resize(size_t(npp));
    for (auto& t : p) t = engine::TokenId(rng.next() % uint64_t(e.vocab_size()));
  }
  std::vector<engine::StepEntry> entries;
  for (int64_t i = 0; i < b; ++i) {
    seqs.push_back(e.new_sequence());
    // Only the batch's last token returns logits, as llama-batched-bench asks.
    entries.push_back({seqs.back(), prompts[size_t(i)], i + 1 == b ? engine::LogitsWanted::Last : engine::LogitsWanted::None});
  }
  auto start = Clock::now();
  if (npp > 0) e.step(entries);
  row.t_pp = std::chrono::duration<double>(Clock::now() - start).count();
  auto next = std::vector<engine::TokenId>(static_cast<size_t>(b));
  start = Clock::now();
  for (int64_t s = 0; s < ntg; ++s) {
    for (int64_t i = 0; i < b; ++i) {
      next[size_t(i)] = engine::TokenId(rng.next() % uint64_t(e.vocab_size()));
      entries[size_t(i)] = {seqs[size_t(i)], std::span(&next[size_t(i)], 1), engine::LogitsWanted::Last};
    }
    e.step(entries);
  }
  row.t_tg = std::chrono::duration<double>(Clock::now() - start).count();
  for (engine::SeqId s : seqs) e.release_sequence(s);
  return row;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

int run_batched_bench(const Args& args) {
  const std::vector<int64_t> npps = int_list(args, "npp", {512}), ntgs = int_list(args, "ntg", {128});
  const std::vector<int64_t> npls = int_list(args, "npl", {1, 4, 16, 64});
  for (int64_t b : npls)
    if (b < 1 || b > 4096) fail("--npl ", b, ": sequences must be 1..4096");
  const int64_t batch = args.get_int("batch", 512);
  if (batch < 1 || batch > 65536) fail("-b ", batch, ": must be 1..65536");
  const std::string output = args.get("output", "md");
  if (output != "md" && output != "csv" && output != "json") fail("-o ", output, ": choose md, csv or json");
  if (args.has("profile") || args.has("trace") || args.has("n-depth"))
    fail("--batched does not take --profile, --trace or -d");
  int64_t ctx = 0, kv = 0;
  for (int64_t p : npps)
    for (int64_t g : ntgs) {
      ctx = std::max(ctx, p + g);
      kv = std::max(kv, (p + g + 31) / 32 * 32 * *std::max_element(npls.begin(), npls.end()));
    }
  if (ctx == 0) fail("nothing to benchmark: --npp and --ntg are both 0");

  const std::string& path = args.positional()[0];
  const int64_t max_b = *std::max_element(npls.begin(), npls.end());
  LoadedModel loaded = load_model(read_model(path), backend_request_from(args),
                                  engine::EngineOptions{.ctx = ctx, .max_batch = batch, .max_seqs = max_b,
                                                        .kv_type = kv_type_from(args)});
  engine::Engine& e = loaded.engine;
  if (kv > e.kv_positions_available())
    fail("--npl ", max_b, " sequences of ", ctx, " positions need ", kv, " KV positions; the KV budget holds ",
         e.kv_positions_available());
  e.reserve_kv(kv);  // the pool at its final size before anything is timed
  engine::Rng rng(1234);
  std::vector<BatchedRow> rows;
  for (int64_t p : npps)
    for (int64_t g : ntgs)
      for (int64_t b : npls) {
        // Warm-up with the measured shapes (the plans of every bucket prepared, clocks up) and a few decode steps.
        measure(e, p, std::min<int64_t>(g, 4), b, rng);
        rows.push_back(measure(e, p, g, b, rng));
        if (output == "md" && rows.size() == 1) {
          std::printf("model %s | %s | KV %s | max batch %lld\n\n", std::filesystem::path(path).stem().c_str(),
                      e.backend().name().c_str(), engine::elem_type_name(e.options().kv_type),
                      static_cast<long long>(e.options().max_batch));
          std::printf("| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |\n");
          std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        }
        const BatchedRow& r = rows.back();
        if (output == "md")
          std::printf("| %lld | %lld | %lld | %lld | %s | %s | %s | %s | %s | %s |\n", (long long)r.npp,
                      (long long)r.ntg, (long long)r.b, (long long)r.n_kv(), fixed(r.t_pp, 3).c_str(),
                      fixed(r.s_pp(), 2).c_str(), fixed(r.t_tg, 3).c_str(), fixed(r.s_tg(), 2).c_str(),
                      fixed(r.t_pp + r.t_tg, 3).c_str(), fixed(r.s(), 2).c_str());
        std::fflush(stdout);
      }
  if (output == "csv") {
    std::printf("model,backend,device,kv_type,pp,tg,b,n_kv,t_pp,s_pp,t_tg,s_tg,t,s\n");
    for (const BatchedRow& r : rows)
      std::printf("%s,%s,%s,%s,%lld,%lld,%lld,%lld,%.6f,%.3f,%.6f,%.3f,%.6f,%.3f\n",
                  engine::json_quote(std::filesystem::path(path).stem().string()).c_str(),
                  engine::json_quote(e.backend().name()).c_str(), engine::json_quote(loaded.device).c_str(),
                  engine::elem_type_name(e.options().kv_type), (long long)r.npp, (long long)r.ntg, (long long)r.b,
                  (long long)r.n_kv(), r.t_pp, r.s_pp(), r.t_tg, r.s_tg(), r.t_pp + r.t_tg, r.s());
  } else if (output == "json") {
    std::printf("[\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const BatchedRow& r = rows[i];
      std::printf("  {\"model\":%s,\"backend\":%s,\"device\":%s,\"kv_type\":\"%s\",\"pp\":%lld,\"tg\":%lld,\"b\":%lld,"
                  "\"n_kv\":%lld,\"t_pp\":%.6f,\"s_pp\":%.3f,\"t_tg\":%.6f,\"s_tg\":%.3f,\"t\":%.6f,\"s\":%.3f}%s\n",
                  engine::json_quote(std::filesystem::path(path).stem().string()).c_str(),
                  engine::json_quote(e.backend().name()).c_str(), engine::json_quote(loaded.device).c_str(),
                  engine::elem_type_name(e.options().kv_type), (long long)r.npp, (long long)r.ntg, (long long)r.b,
                  (long long)r.n_kv(), r.t_pp, r.s_pp(), r.t_tg, r.s_tg(), r.t_pp + r.t_tg, r.s(),
                  i + 1 < rows.size() ? "," : "");
    }
    std::printf("]\n");
  }
  return 0;
}

}  // namespace greta::cli
