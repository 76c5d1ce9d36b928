#include "engine/batch.h"

#include "engine/scheduler.h"

namespace greta::engine {

std::vector<BatchResult> run_batch(Engine& engine, std::span<const BatchRequest> requests, const BatchOptions& options) {
  // Prompts are kept for reuse only while the batch runs (the scheduler gives their pages back at its end).
  Scheduler scheduler(engine, {.parallel = options.parallel, .retain_prompts = options.parallel});
  std::vector<BatchResult> results(requests.size());
  std::vector<uint8_t> done(requests.size(), 0);  // Finished or Failed seen
  for (size_t i = 0; i < requests.size(); ++i) {
    scheduler.submit({.prompt = requests[i].prompt, .options = requests[i].options}, [&, i](const RequestEvent& ev) {
      BatchResult& out = results[i];
      switch (ev.kind) {
        case RequestEvent::Kind::Token:
          out.result.tokens.push_back(ev.token);
          out.result.text += ev.text;
          break;
        case RequestEvent::Kind::ChoiceDone:
          out.result.text += ev.text;
          out.result.stop = ev.stop;
          break;
        case RequestEvent::Kind::Finished: {
          Timings& t = out.result.timings;
          t.prefill_tokens = ev.usage.prompt_tokens - ev.usage.cached_tokens;
          t.prefill_s = ev.usage.prefill_s;
          t.decode_tokens = ev.usage.completion_tokens;
          t.decode_s = ev.usage.decode_s;
          out.reused_tokens = ev.usage.cached_tokens;
          done[i] = 1;
          if (options.on_done) options.on_done(i, out);
          break;
        }
        case RequestEvent::Kind::Failed:
          out.error = ev.error;
          done[i] = 1;
          if (options.on_done) options.on_done(i, out);
          break;
      }
    });
  }
  while (!scheduler.idle()) {
    if (options.interrupted && options.interrupted()) {
      for (size_t i = 0; i < results.size(); ++i)
        if (!done[i]) results[i].interrupted = true;
      break;  // the scheduler releases what it holds
    }
    scheduler.step();
  }
  return results;
}

}  // namespace greta::engine
