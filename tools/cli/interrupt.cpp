#include "interrupt.h"

#include <atomic>

#include "core/error.h"

namespace greta::cli {

namespace {

// The signal of the pending request (0: none). Lock-free, so the handler may store to it.
std::atomic<int> pending_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void record_signal(int signal) { pending_signal.store(signal, std::memory_order_relaxed); }

// Installs the recording handler for `signal`; `previous` receives the disposition it replaces (when not null).
void install(int signal, struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  // One-shot: a second signal before take() re-arms takes the default action (ends the process). No SA_RESTART: a
  // blocking read returns EINTR, so a prompt notices the request at once.
  action.sa_flags = SA_RESETHAND;
  if (sigaction(signal, &action, previous) != 0) fail("cannot install the handler for signal ", signal);
}

}  // namespace

InterruptHandlers::InterruptHandlers() {
  pending_signal.store(0);
  sigaction(SIGINT, nullptr, &previous_int_);
  sigaction(SIGTERM, nullptr, &previous_term_);
  GRETA_CHECK(previous_int_.sa_handler != record_signal && previous_term_.sa_handler != record_signal);
  int_ignored_ = previous_int_.sa_handler == SIG_IGN;
  term_ignored_ = previous_term_.sa_handler == SIG_IGN;
  arm();
}

InterruptHandlers::~InterruptHandlers() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

void InterruptHandlers::arm() {
  if (!int_ignored_) install(SIGINT, nullptr);
  if (!term_ignored_) install(SIGTERM, nullptr);
}

int InterruptHandlers::take() {
  const int signal = pending_signal.exchange(0);
  if (signal != 0) arm();
  return signal;
}

int interrupt_signal() { return pending_signal.load(std::memory_order_relaxed); }

}  // namespace greta::cli
