// Ctrl-C (SIGINT) and SIGTERM as requests that a command honours at its next safe point, instead of ending the process
// with work half done: `run` stops generating and still prints its summary, `chat` stops the reply and keeps the
// conversation, `synth` removes its partial file.
//
// The handler does nothing but record the signal in an atomic (the only process-wide state here: a signal is
// process-wide by nature). Commands poll it: the engine's token callback returns false once it is set, a prompt's
// read returns. The handlers are one-shot (SA_RESETHAND): while a request is still unanswered (a long prefill, which
// has no token callback), a second Ctrl-C ends the process the usual way. take() answers a request and re-arms them.
#pragma once
#include <signal.h>

namespace greta::cli {

class InterruptHandlers {
public:
  // Installs the handlers for SIGINT and SIGTERM (a signal the process inherited as ignored, as a shell does for
  // background jobs, stays ignored) and forgets any earlier request. One instance at a time.
  InterruptHandlers();
  // Restores the previous handlers.
  ~InterruptHandlers();
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;

  // Answers the pending request: returns its signal (0 if none), forgets it and re-arms the handlers.
  int take();

private:
  void arm();

  struct sigaction previous_int_ {}, previous_term_ {};
  bool int_ignored_ = false, term_ignored_ = false;
};

// The signal of a request not yet taken (SIGINT or SIGTERM), or 0. Safe from any thread.
int interrupt_signal();
inline bool interrupt_requested() { return interrupt_signal() != 0; }

// The exit status of a command that ended early on `signal`: 128 + its number, as a shell reports a process the
// signal ended (130 for Ctrl-C), so scripts still see that it was interrupted.
inline int interrupted_exit_code(int signal) { return 128 + signal; }

}  // namespace greta::cli
