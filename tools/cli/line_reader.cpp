#include "line_reader.h"

#include <errno.h>
#include <histedit.h>
#include <langinfo.h>
#include <poll.h>
#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <cstring>
#include <cwchar>

#include "core/error.h"
#include "interrupt.h"

namespace greta::cli {

namespace {

// How long a wait for input lasts before the interrupt flag is looked at again. A signal usually ends the wait at
// once (poll returns EINTR), but only when the thread it is delivered to is the one waiting; with backend worker
// threads around it may land elsewhere.
constexpr int kInterruptCheckMs = 100;
constexpr int kHistoryLines = 1000;

// Waits until stdin has input or an interrupt is requested. False: interrupted (errno = EINTR) or a poll error. An
// interrupt wins over input that came with it (a supervisor's SIGTERM as it closes our stdin is still a SIGTERM).
bool wait_for_input() {
  for (;;) {
    if (interrupt_requested()) {
      errno = EINTR;
      return false;
    }
    pollfd fd{STDIN_FILENO, POLLIN, 0};
    const int ready = poll(&fd, 1, kInterruptCheckMs);
    if (ready < 0 && errno != EINTR) return false;
    if (ready > 0 && !interrupt_requested()) return true;  // input, or a hang-up that read() reports as the end
  }
}

// libedit's character reader (EL_GETCFN). libedit's own reader retries a read() that a signal interrupted, so a
// Ctrl-C at the prompt would go unnoticed until the next key; this one returns -1 (errno EINTR) as soon as an
// interrupt is requested, which ends el_gets(). Bytes are decoded as multibyte characters of the locale (UTF-8).
int read_terminal_char(EditLine*, wchar_t* out) {
  std::mbstate_t state{};
  *out = L'\0';
  for (;;) {
    if (!wait_for_input()) return -1;
    char byte;
    const ssize_t n = ::read(STDIN_FILENO, &byte, 1);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -1;
    }
    if (n == 0) return 0;  // end of input
    wchar_t wide;
    const size_t used = std::mbrtowc(&wide, &byte, 1, &state);
    if (used == static_cast<size_t>(-2)) continue;  // the middle of a character
    if (used == static_cast<size_t>(-1)) {          // not a character of the locale: dropped, as libedit does
      state = {};
      continue;
    }
    *out = wide;
    return 1;
  }
}

bool locale_is_utf8() {
  const char* codeset = nl_langinfo(CODESET);
  return codeset && (!std::strcmp(codeset, "UTF-8") || !std::strcmp(codeset, "utf8"));
}

}  // namespace

struct LineReader::Editor {
  EditLine* line = nullptr;
  History* history = nullptr;
  std::string prompt;
  std::string saved_ctype;  // LC_CTYPE before the editor changed it, restored at the end

  static char* prompt_of(EditLine* line) {
    void* data = nullptr;
    el_get(line, EL_CLIENTDATA, &data);
    return static_cast<Editor*>(data)->prompt.data();
  }

  Editor() {
    // libedit decodes keys and measures characters through the locale's LC_CTYPE; the program starts in the "C"
    // locale, where no byte above 127 is a character. Take the user's; chat text is UTF-8 whatever the locale says, so
    // fall back to C.UTF-8 when the user's is not UTF-8.
    if (const char* current = std::setlocale(LC_CTYPE, nullptr)) saved_ctype = current;
    std::setlocale(LC_CTYPE, "");
    if (!locale_is_utf8()) std::setlocale(LC_CTYPE, "C.UTF-8");

    line = el_init("greta-vk", stdin, stdout, stderr);
    history = history_init();
    if (!line || !history) fail("cannot start the line editor (libedit)");
    HistEvent event;
    ::history(history, &event, H_SETSIZE, kHistoryLines);
    ::history(history, &event, H_SETUNIQUE, 1);  // a line repeated at once is kept once
    el_set(line, EL_CLIENTDATA, this);
    el_set(line, EL_PROMPT, &Editor::prompt_of);
    el_set(line, EL_EDITOR, "emacs");
    el_set(line, EL_HIST, ::history, history);
    el_set(line, EL_GETCFN, &read_terminal_char);
    // EL_SIGNAL stays off: libedit's handlers would pass a Ctrl-C on with kill(0, SIGINT), to the whole process group
    // (the other commands of a pipeline too).
    el_source(line, nullptr);  // ~/.editrc (or $EDITRC): the user's key bindings
  }

  ~Editor() {
    if (line) el_end(line);
    if (history) history_end(history);
    if (!saved_ctype.empty()) std::setlocale(LC_CTYPE, saved_ctype.c_str());
  }
};

LineReader::LineReader() {
  if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) editor_ = std::make_unique<Editor>();
}

LineReader::~LineReader() = default;

LineReader::Result LineReader::read(const std::string& prompt, std::string& line) {
  line.clear();
  return editor_ ? read_edited(prompt, line) : read_plain(line);
}

void LineReader::remember(const std::string& line) {
  if (!editor_ || line.empty()) return;
  HistEvent event;
  ::history(editor_->history, &event, H_ENTER, line.c_str());
}

LineReader::Result LineReader::read_edited(const std::string& prompt, std::string& line) {
  editor_->prompt = prompt;
  std::fflush(stdout);
  int count = 0;
  const char* text = el_gets(editor_->line, &count);
  if (text && count > 0) {
    line.assign(text, size_t(count));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return Result::Line;
  }
  if (interrupt_requested()) {
    // What was typed before Ctrl-C is still in libedit's buffer: the caller tells "discard this line" from "leave".
    const LineInfo* typed = el_line(editor_->line);
    if (typed && typed->lastchar > typed->buffer) line.assign(typed->buffer, typed->lastchar);
    return Result::Interrupted;
  }
  return Result::EndOfInput;  // Ctrl-D on an empty line (count 0), or a read error (count -1)
}

LineReader::Result LineReader::read_plain(std::string& line) {
  for (;;) {
    const size_t end = unread_.find('\n');
    if (end != std::string::npos) {
      line = unread_.substr(0, end);
      unread_.erase(0, end + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return Result::Line;
    }
    if (input_ended_) {
      if (unread_.empty()) return Result::EndOfInput;
      line = std::move(unread_);  // a last line without its newline
      unread_.clear();
      return Result::Line;
    }
    if (!wait_for_input()) {
      if (interrupt_requested()) return Result::Interrupted;
      input_ended_ = true;
      continue;
    }
    char buffer[4096];
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) input_ended_ = true;
    else unread_.append(buffer, size_t(n));
  }
}

}  // namespace greta::cli
