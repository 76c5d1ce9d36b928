// greta-vk chat MODEL: an interactive conversation through the model's chat template. One line of stdin is one
// message (a line ending in '\' continues on the next); the reply streams to stdout. The KV cache is kept across
// turns, so each turn only prefills what is new. EOF (Ctrl-D) ends the conversation; so does a full context.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "args.h"
#include "backend_factory.h"
#include "chat_session.h"
#include "commands.h"
#include "core/error.h"
#include "generation.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_chat_options[] = {
    {"stop", nullptr, true, "end a reply when its text contains this string (not shown); repeatable"},
    {"system", nullptr, true, "the system message"},
    {"chat-template", nullptr, true, "use this template family instead of the model's (chatml, llama2, llama3, ...)"},
    {"n-predict", "n", true, "tokens per reply at most (default 512; -1: until the end of the turn)"},
    {"ctx", "c", true, "context size in tokens (default: the model's, capped by memory)"},
    {"verbose", "v", false, "print per-turn token counts and speeds to stderr"},
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk chat MODEL [--system TEXT] [--chat-template NAME] [-n N] [--ctx C] [sampling options] "
    "[--backend cpu|vk|hip] [--device N] [--threads N]";

constexpr int64_t kDefaultReplyTokens = 512;

// Reads one message: a line, continued while it ends in a backslash. False at EOF with nothing read.
bool read_message(std::string& message) {
  message.clear();
  std::string line;
  bool any = false;
  while (std::getline(std::cin, line)) {
    any = true;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      continue;
    }
    message += line;
    return true;
  }
  return any;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  const auto specs = join_options({k_chat_options, sampling_option_specs(), kv_option_specs(), backend_option_specs()});
  Args args(argc, argv, specs);
  if (args.has("help")) {
    std::printf("usage: %s\n\nChats with a model through its chat template (tokenizer.chat_template). One line is one "
                "message; end a line with '\\' to continue it. Ctrl-D ends the conversation.\n\n%s",
                k_usage, usage_options(specs).c_str());
    return 0;
  }
  args.expect_positional(1, 1, k_usage);
  const engine::SamplerParams sampling = sampling_params_from(args);
  const int64_t reply_tokens = args.get_int("n-predict", kDefaultReplyTokens);
  if (reply_tokens < -1 || reply_tokens == 0) fail("-n ", reply_tokens, ": must be -1 (no limit) or positive");
  const int64_t ctx = args.get_int("ctx", 0);
  if (ctx < 0) fail("--ctx ", ctx, ": must be positive (0: the model's context length)");
  const bool verbose = args.has("verbose");
  const BackendRequest backend = backend_request_from(args);
  std::optional<ChatTemplate> forced;
  if (args.has("chat-template")) forced = ChatTemplate::from_name(args.get("chat-template"));

  LoadedModel loaded = load_model(read_model(args.positional()[0]), backend, engine::EngineOptions{.ctx = ctx, .kv_type = kv_type_from(args)});
  engine::Engine& engine = loaded.engine;
  const auto template_text = engine.file().get_string("tokenizer.chat_template");
  const ChatTemplate tmpl = forced ? *forced : ChatTemplate::detect(template_text.value_or(""));
  std::fprintf(stderr, "chat template: %s%s; context %lld tokens; seed %llu. One line per message, Ctrl-D to end.\n",
               tmpl.name().c_str(),
               forced                                         ? " (--chat-template)"
               : !template_text                               ? " (the model has none)"
               : tmpl.family == ChatFamily::Plain             ? " (the model's template is not a known family)"
                                                              : "",
               static_cast<long long>(engine.context_size()), static_cast<unsigned long long>(sampling.seed));

  ChatSession session(engine, tmpl, sampling, args.get("system"));
  session.set_stop(args.get_all("stop"));
  const bool interactive = isatty(fileno(stdin)) != 0;
  std::string message;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!read_message(message)) break;
    if (message.find_first_not_of(" \t\n") == std::string::npos) continue;

    greta::Utf8Stream utf8;
    auto stream = [&](engine::TokenId, std::string_view piece) {
      const std::string ready = utf8.push(piece);
      std::fwrite(ready.data(), 1, ready.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    const ChatTurn turn = session.send(message, reply_tokens, stream);
    const std::string rest = utf8.finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    if (turn.new_tokens > 0) std::fputc('\n', stdout);
    std::fflush(stdout);
    if (verbose && turn.new_tokens > 0)
      std::fprintf(stderr, "[turn %lld: prefilled %lld new tokens, replied %zu tokens (%s), context %lld/%lld, "
                           "prefill %s tokens/s, decode %s tokens/s]\n",
                   static_cast<long long>(session.turns()), static_cast<long long>(turn.new_tokens),
                   turn.reply.tokens.size(), engine::stop_reason_name(turn.reply.stop),
                   static_cast<long long>(engine.n_past()), static_cast<long long>(engine.context_size()),
                   format_rate(turn.reply.timings.prefill_tokens_per_s()).c_str(),
                   format_rate(turn.reply.timings.decode_tokens_per_s()).c_str());
    if (turn.context_full) {
      std::fprintf(stderr, "context full: the conversation has used the whole context of %lld tokens; ending it "
                           "(use a larger --ctx for longer conversations)\n",
                   static_cast<long long>(engine.context_size()));
      return 0;
    }
  }
  if (interactive) std::fputc('\n', stdout);
  return 0;
}

}  // namespace greta::cli
