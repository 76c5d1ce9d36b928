// Input for `greta-vk chat`, a line at a time.
//
// On a terminal (stdin and stdout both TTYs) lines are read with libedit, the BSD line editor: a prompt, emacs-style
// editing (arrow keys, Home/End, Ctrl-A/E/K/W, Ctrl-R searches the history), ~/.editrc bindings, and the lines of
// this session as history (Up/Down). The history is not written to disk: conversations may be private.
//
// Otherwise (a pipe, a file) lines are read plainly: no prompt, no escape sequences, nothing but the replies on
// stdout, which is what scripts and tests expect.
//
// Both modes notice a Ctrl-C / SIGTERM request (interrupt.h) while waiting for input and return at once.
#pragma once
#include <memory>
#include <string>

namespace greta::cli {

class LineReader {
public:
  enum class Result {
    Line,         // a line was read (without its line ending)
    Interrupted,  // a Ctrl-C / SIGTERM request arrived; `line` holds what had been typed on the line
    EndOfInput,   // Ctrl-D on an empty line, or the end of a pipe or file
  };

  LineReader();
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // True when reading through the line editor (stdin and stdout are terminals).
  bool editing() const { return editor_ != nullptr; }

  // Reads one line; `prompt` is shown only when editing.
  Result read(const std::string& prompt, std::string& line);
  // Adds a line to the history that Up/Down and Ctrl-R reach (when editing).
  void remember(const std::string& line);

private:
  struct Editor;  // libedit's state
  Result read_edited(const std::string& prompt, std::string& line);
  Result read_plain(std::string& line);

  std::unique_ptr<Editor> editor_;
  std::string unread_;  // plain mode: bytes read past the last line returned
  bool input_ended_ = false;
};

}  // namespace greta::cli
