// greta-vk chat MODEL: an interactive conversation through the model's chat template. One line of input is one
// message (a line ending in '\' continues on the next); the reply streams to stdout, everything else (notes,
// warnings, the commands' answers) goes to stderr, so a piped chat's stdout holds the replies only. The KV cache is
// kept across turns, so each turn only prefills what is new.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "args.h"
#include "backend_factory.h"
#include "chat_session.h"
#include "chat_transcript.h"
#include "commands.h"
#include "core/error.h"
#include "generation.h"
#include "interrupt.h"
#include "line_reader.h"
#include "model/harmony.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_chat_options[] = {
    {"stop", nullptr, true, "end a reply when its text contains this string (not shown); repeatable"},
    {"system", nullptr, true, "the system message"},
    {"chat-template", nullptr, true, "use this template family instead of the model's (chatml, llama2, llama3, ...)"},
    {"n-predict", "n", true, "tokens per reply at most (default 512; -1: until the end of the turn)"},
    {"ctx", "c", true, "context size in tokens (default: the model's, capped by memory)"},
    {"context-shift", nullptr, false,
     "when a message does not fit, drop the oldest exchanges (the system message stays) instead of refusing it"},
    {"verbose", "v", false, "print per-turn token counts and speeds to stderr"},
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk chat MODEL [--system TEXT] [--chat-template NAME] [-n N] [--ctx C] [--context-shift] [--stop TEXT] "
    "[sampling options] [--kv-type f16|f32|q8_0] [--backend cpu|vk|hip] [--device N] [--threads N]";

constexpr const char* k_commands_help =
    "  /help          this list\n"
    "  /clear         forget the conversation (the system message stays)\n"
    "  /system TEXT   set the system message (without TEXT: none); the conversation is kept and read again with it\n"
    "  /save FILE     write the conversation to FILE as JSON, as an OpenAI chat request's \"messages\"\n"
    "  /load FILE     replace the conversation with one from FILE (as /save writes it)\n"
    "  /bye           leave (so do Ctrl-D, and Ctrl-C at an empty prompt)\n"
    "  A message that starts with '/' is typed with two: '//etc' sends '/etc'.\n";

constexpr const char* k_description =
    "Chats with a model through its chat template (tokenizer.chat_template). One line is one message; end a line "
    "with '\\' to continue it on the next. On a terminal the line can be edited (arrow keys, Home/End, Ctrl-A/E/K/W; "
    "Up/Down and Ctrl-R reach this session's earlier lines; ~/.editrc for key bindings). Replies go to stdout, "
    "everything else to stderr.\n\n"
    "Ctrl-C stops a reply and returns to the prompt (the reply so far stays in the conversation); at an empty "
    "prompt, Ctrl-C or Ctrl-D leaves.\n\n"
    "A message that does not fit in what is left of the context is not sent, and the conversation stays as it was "
    "(/clear starts over). With --context-shift the oldest exchanges are dropped instead: the system message and "
    "the most recent exchanges that fit with the new message and room for its reply (-n tokens, at most half the "
    "context) are prefilled again. A reply that reaches the end of the context is cut there.\n\n"
    "Commands:\n";

constexpr int64_t kDefaultReplyTokens = 512;

enum class Next { Continue, Leave };

// Reads one message: a line, continued while it ends in a backslash. A message cut short by the end of input is
// still a message; an interrupt returns what had been typed of it (possibly nothing).
LineReader::Result read_message(LineReader& reader, std::string& message) {
  message.clear();
  std::string line;
  for (bool first = true;; first = false) {
    const LineReader::Result result = reader.read(first ? "> " : "... ", line);
    if (result == LineReader::Result::EndOfInput) return first ? result : LineReader::Result::Line;
    if (result == LineReader::Result::Interrupted) {
      message += line;
      return result;
    }
    reader.remember(line);
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      continue;
    }
    message += line;
    return result;
  }
}

// The conversation, as /save writes it.
ChatTranscript transcript_of(const ChatSession& session) {
  ChatTranscript transcript{session.system(), {}};
  for (const ChatExchange& e : session.exchanges()) transcript.exchanges.push_back({e.user, e.reply});
  return transcript;
}

// Runs a /command; throws greta::Error for a command that fails (the conversation is unchanged then).
Next run_command(const std::string& line, ChatSession& session) {
  constexpr const char* blanks = " \t\n";
  const size_t name_end = std::min(line.find_first_of(blanks), line.size());
  const std::string name = line.substr(0, name_end);
  const size_t argument_start = std::min(line.find_first_not_of(blanks, name_end), line.size());
  const size_t argument_end = line.find_last_not_of(blanks) + 1;
  const std::string argument =
      argument_start < argument_end ? line.substr(argument_start, argument_end - argument_start) : "";
  auto need_argument = [&](const char* what) {
    if (argument.empty()) fail(name, " needs ", what);
  };

  if (name == "/bye") return Next::Leave;
  if (name == "/help") {
    std::fputs(k_commands_help, stderr);
  } else if (name == "/clear") {
    session.clear();
    std::fputs("the conversation is cleared\n", stderr);
  } else if (name == "/system") {
    session.set_system(argument);
    std::fputs(argument.empty() ? "no system message now\n" : "the system message is set\n", stderr);
  } else if (name == "/save") {
    need_argument("a file name");
    save_transcript(argument, transcript_of(session));
    const size_t n = session.exchanges().size();
    std::fprintf(stderr, "saved %zu exchange%s to %s\n", n, n == 1 ? "" : "s", argument.c_str());
  } else if (name == "/load") {
    need_argument("a file name");
    ChatTranscript transcript = load_transcript(argument);
    std::vector<ChatExchange> exchanges;
    for (auto& e : transcript.exchanges) {
      std::vector<engine::TokenId> reply_tokens = session.reply_tokens_of(e.reply);
      exchanges.push_back({std::move(e.user), std::move(e.reply), std::move(reply_tokens)});
    }
    session.replace(std::move(transcript.system), std::move(exchanges));
    const size_t n = session.exchanges().size();
    std::fprintf(stderr, "loaded %zu exchange%s%s from %s\n", n, n == 1 ? "" : "s",
                 session.system().empty() ? "" : " and a system message", argument.c_str());
  } else {
    fail("unknown command ", name, " (/help lists them; '//' starts a message with '/')");
  }
  return Next::Continue;
}

// Sends a message and streams the reply. Returns the signal that interrupted the reply (0: none).
int send_message(const std::string& message, ChatSession& session, InterruptHandlers& interrupts, int64_t reply_tokens,
                 bool verbose) {
  greta::Utf8Stream utf8, reasoning_utf8;
  // gpt-oss's harmony replies: the final channel is the reply; the reasoning goes to stderr with --verbose.
  model::HarmonyReply harmony(session.tokenizer());
  auto stream = [&](engine::TokenId token, std::string_view piece) {
    const model::HarmonyReply::Part part = harmony.feed(token, piece);
    if (part == model::HarmonyReply::Part::Reasoning && verbose) {
      const std::string ready = reasoning_utf8.push(piece);
      std::fwrite(ready.data(), 1, ready.size(), stderr);
    } else if (part == model::HarmonyReply::Part::Answer) {
      const std::string ready = utf8.push(piece);
      std::fwrite(ready.data(), 1, ready.size(), stdout);
      std::fflush(stdout);
    }
    return !interrupt_requested();  // Ctrl-C: stop the reply here, what was shown stays in the conversation
  };
  const ChatTurn turn = session.send(message, reply_tokens, stream);
  if (turn.rejected) {
    if (!turn.fits_alone)
      std::fprintf(stderr, "message not sent: its %lld tokens do not fit in the context of %lld%s (use a larger "
                           "--ctx)\n",
                   static_cast<long long>(turn.message_tokens), static_cast<long long>(session.context_size()),
                   session.system().empty() ? "" : " with the system message");
    else
      std::fprintf(stderr, "message not sent: its %lld tokens do not fit in the %lld left of the context's %lld "
                           "(/clear starts over; --context-shift drops the oldest exchanges instead)\n",
                   static_cast<long long>(turn.message_tokens),
                   static_cast<long long>(session.context_size() - session.context_used()),
                   static_cast<long long>(session.context_size()));
    return interrupts.take();
  }
  const std::string rest = utf8.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const int signal = interrupts.take();
  if (turn.dropped_exchanges > 0)
    std::fprintf(stderr, "context shift: the oldest %s dropped to make room; the system message and the last %zu "
                         "kept\n",
                 turn.dropped_exchanges == 1 ? "exchange was" : cat(turn.dropped_exchanges, " exchanges were").c_str(),
                 session.exchanges().size() - 1);
  if (verbose)
    std::fprintf(stderr, "[turn %lld: prefilled %lld new tokens, replied %zu tokens (%s), context %lld/%lld, "
                         "prefill %s tokens/s, decode %s tokens/s]\n",
                 static_cast<long long>(session.turns()), static_cast<long long>(turn.new_tokens),
                 turn.reply.tokens.size(), signal ? "interrupted" : engine::stop_reason_name(turn.reply.stop),
                 static_cast<long long>(session.context_used()), static_cast<long long>(session.context_size()),
                 format_rate(turn.reply.timings.prefill_tokens_per_s()).c_str(),
                 format_rate(turn.reply.timings.decode_tokens_per_s()).c_str());
  if (turn.context_full)
    std::fprintf(stderr, "context full: the reply was cut at the end of the context; %s\n",
                 session.context_shift() ? "the next message drops the oldest exchanges"
                                         : "/clear starts over (--context-shift drops the oldest exchanges instead)");
  return signal;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  const auto specs = join_options({k_chat_options, sampling_option_specs(), kv_option_specs(), backend_option_specs()});
  Args args(argc, argv, specs);
  if (args.has("help")) {
    std::printf("usage: %s\n\n%s%s\n%s", k_usage, k_description, k_commands_help, usage_options(specs).c_str());
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

  LoadedModel loaded = load_model(read_model(args.positional()[0]), backend,
                                  engine::EngineOptions{.ctx = ctx, .kv_type = kv_type_from(args)});
  engine::Engine& engine = loaded.engine;
  const auto template_text = engine.file().get_string("tokenizer.chat_template");
  const ChatTemplate tmpl = forced ? *forced : ChatTemplate::detect(template_text.value_or(""));
  if (forced) {
    // A template whose turn markers this vocabulary lacks still renders, as text the model never saw as markers.
    const auto missing = model::missing_special_markers(tmpl, engine.tokenizer());
    std::string list;
    for (std::string_view marker : missing) list += cat(list.empty() ? "" : ", ", marker);
    if (!missing.empty())
      std::fprintf(stderr, "warning: --chat-template %s: %s %s of this model's vocabulary: the turns are marked with "
                   "plain text the model was not trained on (its own template: %s)\n",
                   tmpl.name().c_str(), list.c_str(), missing.size() == 1 ? "is not a token" : "are not tokens",
                   ChatTemplate::detect(template_text.value_or("")).name().c_str());
  }
  std::fprintf(stderr, "chat template: %s%s; context %lld tokens; seed %llu. /help lists the commands; Ctrl-C stops "
                       "a reply; Ctrl-D or /bye leaves.\n",
               tmpl.name().c_str(),
               forced                                         ? " (--chat-template)"
               : !template_text                               ? " (the model has none)"
               : tmpl.family == ChatFamily::Plain             ? " (the model's template is not a known family)"
                                                              : "",
               static_cast<long long>(engine.context_size()), static_cast<unsigned long long>(sampling.seed));

  ChatSession session(engine, tmpl, sampling, args.get("system"));
  session.set_stop(args.get_all("stop"));
  if (args.has("context-shift")) {
    // Room kept for the reply when making room for a message: its -n, at most half the context.
    const int64_t half = std::max<int64_t>(1, engine.context_size() / 2);
    session.set_context_shift(reply_tokens > 0 ? std::min(reply_tokens, half) : half);
  }

  // Installed after the load: a Ctrl-C while the model loads still ends the program at once.
  InterruptHandlers interrupts;
  LineReader reader;
  bool hinted = false;  // the note on how to leave, shown after the first interrupted reply
  std::string message;
  for (;;) {
    const LineReader::Result result = read_message(reader, message);
    if (result == LineReader::Result::EndOfInput) {
      if (reader.editing()) std::fputc('\n', stdout);
      break;
    }
    if (result == LineReader::Result::Interrupted) {
      // Ctrl-C on a typed line discards the line; on an empty prompt it leaves. SIGTERM always leaves.
      const int signal = interrupts.take();
      if (reader.editing()) std::fputc('\n', stdout);
      if (signal == SIGTERM) return interrupted_exit_code(signal);
      if (message.empty()) break;
      continue;
    }
    if (message.find_first_not_of(" \t\n") == std::string::npos) continue;
    if (message[0] == '/' && message.compare(0, 2, "//") != 0) {
      try {
        if (run_command(message, session) == Next::Leave) break;
      } catch (const greta::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
      }
      continue;
    }
    if (message.compare(0, 2, "//") == 0) message.erase(0, 1);
    const int signal = send_message(message, session, interrupts, reply_tokens, verbose);
    if (signal == SIGTERM) return interrupted_exit_code(signal);  // a supervisor's stop: said by the exit status
    if (signal != 0 && !hinted) {
      std::fputs("(reply stopped; Ctrl-C or Ctrl-D at an empty prompt leaves)\n", stderr);
      hinted = true;
    }
  }
  return 0;
}

}  // namespace greta::cli
