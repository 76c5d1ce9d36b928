#include "bench_batched.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/split_backend.h"
#include "generation.h"
#include "json_output.h"

namespace greta::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BatchedRow {
  int64_t npp = 0, ntg = 0, b = 0;
  double t_pp = 0, t_tg = 0;
  std::map<std::string, double> op_seconds;  // --profile: device time per op kind over the decode steps
  double device_tg = 0;                       // device-busy seconds of the decode steps (0: not measured)
  engine::CrossingStats cross_pp, cross_tg;   // a layer split's hand-offs between devices in the prefill, the decode
  int64_t n_kv() const { return b * (npp + ntg); }
  double s_pp() const { return t_pp > 0 ? double(b * npp) / t_pp : 0; }
  double s_tg() const { return t_tg > 0 ? double(b * ntg) / t_tg : 0; }
  double s() const { return t_pp + t_tg > 0 ? double(n_kv()) / (t_pp + t_tg) : 0; }
};

// One measurement: B fresh sequences, one step with every prompt (the engine splits it into passes), then ntg
// decode steps of B tokens. Returns the two times (and with `profile`, the decode steps' device time per op kind;
// with `split`, the hand-offs between its devices in each part).
BatchedRow measure(engine::Engine& e, int64_t npp, int64_t ntg, int64_t b, engine::Rng& rng, bool profile,
                   const engine::SplitBackend* split) {
  BatchedRow row;
  row.npp = npp, row.ntg = ntg, row.b = b;
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
  const auto crossings = [&] { return split ? split->crossings() : engine::CrossingStats{}; };
  const auto since = [&](const engine::CrossingStats& before) {
    const engine::CrossingStats now = crossings();
    return engine::CrossingStats{now.copies - before.copies, now.bytes - before.bytes, now.seconds - before.seconds};
  };
  engine::CrossingStats before = crossings();
  auto start = Clock::now();
  if (npp > 0) e.step(entries);
  row.t_pp = std::chrono::duration<double>(Clock::now() - start).count();
  row.cross_pp = since(before);
  auto next = std::vector<engine::TokenId>(static_cast<size_t>(b));
  if (profile) clear_op_seconds(e);
  const double device_before = e.timings().device_s;
  before = crossings();
  start = Clock::now();
  for (int64_t s = 0; s < ntg; ++s) {
    for (int64_t i = 0; i < b; ++i) {
      next[size_t(i)] = engine::TokenId(rng.next() % uint64_t(e.vocab_size()));
      entries[size_t(i)] = {seqs[size_t(i)], std::span(&next[size_t(i)], 1), engine::LogitsWanted::Last};
    }
    e.step(entries);
  }
  row.t_tg = std::chrono::duration<double>(Clock::now() - start).count();
  row.cross_tg = since(before);
  if (profile) row.op_seconds = collect_op_seconds(e);
  row.device_tg = e.timings().device_s - device_before;
  for (engine::SeqId s : seqs) e.release_sequence(s);
  return row;
}

// A CSV field, quoted (RFC 4180: inner quotes doubled).
std::string csv_field(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A layer split's hand-offs per (PP, TG, B): how many, and their wall time against the part's.
void print_crossings(std::FILE* out, const std::string& placement, const std::vector<BatchedRow>& rows) {
  std::fprintf(out, "\nlayer split: %s\n| PP | TG | B | PP hand-offs | PP crossing ms | share of T_PP | TG hand-offs "
                    "per step | TG crossing ms per step | share of T_TG |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
               placement.c_str());
  for (const BatchedRow& r : rows) {
    const double steps = double(std::max<int64_t>(r.ntg, 1));
    std::fprintf(out, "| %lld | %lld | %lld | %lld | %s | %s%% | %s | %s | %s%% |\n", (long long)r.npp, (long long)r.ntg,
                 (long long)r.b, (long long)r.cross_pp.copies, fixed(1e3 * r.cross_pp.seconds, 3).c_str(),
                 fixed(r.t_pp > 0 ? 100 * r.cross_pp.seconds / r.t_pp : 0, 1).c_str(),
                 fixed(double(r.cross_tg.copies) / steps, 0).c_str(), fixed(1e3 * r.cross_tg.seconds / steps, 3).c_str(),
                 fixed(r.t_tg > 0 ? 100 * r.cross_tg.seconds / r.t_tg : 0, 1).c_str());
  }
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
  if (args.has("n-depth")) fail("--batched does not take -d");
  const bool profile = args.has("profile");
  // --trace: the timed prefill and decode steps of every (PP, TG, B), not the warm-ups.
  TraceRequest trace(args);
  int64_t ctx = 0, kv = 0;
  for (int64_t p : npps)
    for (int64_t g : ntgs) {
      ctx = std::max(ctx, p + g);
      kv = std::max(kv, (p + g + 31) / 32 * 32 * *std::max_element(npls.begin(), npls.end()));
    }
  if (ctx == 0) fail("nothing to benchmark: --npp and --ntg are both 0");
  // --ctx: plans for longer sequences than the test's (a server's context; the KV pool stays the test's size).
  if (args.has("ctx")) {
    const int64_t c = args.get_int("ctx", 0);
    if (c < ctx || c > (int64_t(1) << 24))
      fail("--ctx ", c, ": must be at least the longest npp + ntg (", ctx, ") and at most 16777216");
    ctx = c;
  }

  const std::string& path = args.positional()[0];
  const int64_t max_b = *std::max_element(npls.begin(), npls.end());
  BackendRequest backend = backend_request_from(args);
  backend.experiment_switches = true;  // GRETA_VK_* kernel switches, for measurements
  LoadedModel loaded = load_model(read_model(path), backend,
                                  engine::EngineOptions{.ctx = ctx, .max_batch = batch, .max_seqs = max_b,
                                                        .kv_type = kv_type_from(args)});
  engine::Engine& e = loaded.engine;
  if (kv > e.kv_positions_available())
    fail("--npl ", max_b, " sequences of ", ctx, " positions need ", kv, " KV positions; the KV budget holds ",
         e.kv_positions_available());
  e.reserve_kv(kv);  // the pool at its final size before anything is timed
  e.backend().set_profiling(profile);
  e.backend().set_step_timing(true);  // each step's device time (nothing serialized), printed below the table
  trace.attach(e);      // profiling on where --trace asks for it
  e.set_trace(nullptr);  // the trace takes the timed runs only (below)
  engine::Rng rng(1234);
  std::vector<BatchedRow> rows;
  for (int64_t p : npps)
    for (int64_t g : ntgs)
      for (int64_t b : npls) {
        // Warm-up with the measured shapes (the plans of every bucket prepared, clocks up) and a few decode steps.
        measure(e, p, std::min<int64_t>(g, 4), b, rng, false, loaded.split);
        e.set_trace(trace.sink());
        rows.push_back(measure(e, p, g, b, rng, profile, loaded.split));
        e.set_trace(nullptr);
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
                  csv_field(std::filesystem::path(path).stem().string()).c_str(), csv_field(e.backend().name()).c_str(),
                  csv_field(loaded.device).c_str(),
                  engine::elem_type_name(e.options().kv_type), (long long)r.npp, (long long)r.ntg, (long long)r.b,
                  (long long)r.n_kv(), r.t_pp, r.s_pp(), r.t_tg, r.s_tg(), r.t_pp + r.t_tg, r.s());
  } else if (output == "json") {
    Json out = Json::array();
    for (const BatchedRow& r : rows) {
      Json row = {{"model", std::filesystem::path(path).stem().string()},
                                    {"backend", e.backend().name()},
                                    {"device", loaded.device},
                                    {"kv_type", engine::elem_type_name(e.options().kv_type)},
                                    {"pp", r.npp}, {"tg", r.ntg}, {"b", r.b}, {"n_kv", r.n_kv()},
                                    {"t_pp", r.t_pp}, {"s_pp", r.s_pp()}, {"t_tg", r.t_tg}, {"s_tg", r.s_tg()},
                                    {"t", r.t_pp + r.t_tg}, {"s", r.s()}};
      if (profile) row["tg_op_seconds"] = r.op_seconds;
      if (r.device_tg > 0 && r.t_tg > 0) row["tg_device_fraction"] = r.device_tg / r.t_tg;
      if (loaded.split)
        row["crossings"] = {{"pp_copies", r.cross_pp.copies}, {"pp_s", r.cross_pp.seconds},
                            {"tg_copies", r.cross_tg.copies}, {"tg_s", r.cross_tg.seconds}};
      out.push_back(std::move(row));
    }
    std::printf("%s\n", out.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  }
  if (profile && output != "json") {
    std::FILE* f = output == "md" ? stdout : stderr;
    for (const BatchedRow& r : rows) {
      double total = 0;
      for (const auto& [kind, sec] : r.op_seconds) total += sec;
      std::vector<std::pair<std::string, double>> kinds(r.op_seconds.begin(), r.op_seconds.end());
      std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      const double steps = double(std::max<int64_t>(r.ntg, 1));
      std::fprintf(f, "\nprofile of the decode steps, B = %lld (backend profiling on): device busy %s%% of the wall "
                      "time, %s ms per step on the device\n\n| op | ms per step | share |\n|---|---:|---:|\n",
                   static_cast<long long>(r.b), fixed(r.t_tg > 0 ? 100 * r.device_tg / r.t_tg : 0, 1).c_str(),
                   fixed(1e3 * r.device_tg / steps, 3).c_str());
      for (const auto& [kind, sec] : kinds)
        if (sec > 0)  // fused ops run inside others
          std::fprintf(f, "| %s | %s | %s%% |\n", kind.c_str(), fixed(1e3 * sec / steps, 3).c_str(),
                     fixed(total > 0 ? 100 * sec / total : 0, 1).c_str());
    }
  }
  if (!profile && output != "json") {  // lines, not a table: scripts read the table's last row
    std::string line;
    for (const BatchedRow& r : rows)
      if (r.device_tg > 0 && r.t_tg > 0)
        line += cat(line.empty() ? "" : ", ", "B = ", r.b, " ", fixed(1e3 * r.device_tg / double(std::max<int64_t>(r.ntg, 1)), 3),
                    " ms (", fixed(100 * r.device_tg / r.t_tg, 1), "%)");
    if (!line.empty())
      std::fprintf(output == "md" ? stdout : stderr,
                   "\ndecode steps on the device (first to last command of each step; share of T_TG): %s\n", line.c_str());
  }
  if (loaded.split && output != "json")
    print_crossings(output == "md" ? stdout : stderr, loaded.split->placement().describe(), rows);
  trace.write();
  return 0;
}

}  // namespace greta::cli
