// Shared pieces of the Vulkan runtime tests.
//
// VkFixture (use with TEST_CASE_FIXTURE) owns a Context on the default device plus an Allocator, Pipelines and a
// Transfer with a small staging chunk, made on first use. When it is destroyed (still inside the test case) it tears
// them down and then CHECKs that the validation layer recorded nothing - teardown messages such as leaked objects
// included. With GRETA_VK_VALIDATION=1 (the greta_vk_tests_validation CTest entry) every test case therefore fails
// on any validation warning or error.
#pragma once
#include <doctest/doctest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "vk/commands.h"
#include "vk/context.h"
#include "vk/memory.h"
#include "vk/pipelines.h"
#include "vk/transfer.h"

extern char** environ;

namespace greta::vk::test {

// A per-process scratch directory (pipeline caches never go to the real ~/.cache during tests).
inline std::filesystem::path scratch_dir(const std::string& leaf) {
  auto dir = std::filesystem::temp_directory_path() / ("greta-vk-tests-" + std::to_string(getpid())) / leaf;
  std::filesystem::create_directories(dir);
  return dir;
}

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a program with extra environment variables (NAME=VALUE) and collects its output.
inline ProcessResult run_process(const std::vector<std::string>& args, const std::vector<std::string>& extra_env) {
  std::vector<std::string> env_strings(extra_env);
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& x : extra_env) overridden |= x.compare(0, key.size() + 1, key + "=") == 0;
    if (!overridden) env_strings.push_back(entry);
  }
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int fds[2];
  REQUIRE(pipe(fds) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  ProcessResult result;
  if (rc != 0) {
    close(fds[0]);
    FAIL("could not start " << args[0] << ": " << std::strerror(rc));
    return result;
  }
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) result.output.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng() >> 24);
  return v;
}

inline std::vector<uint32_t> random_words(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> v(n);
  for (auto& w : v) w = rng();
  return v;
}

// Test contexts: scratch cache directory, warnings collected instead of printed.
inline ContextOptions test_options() {
  ContextOptions o;
  o.cache_dir = scratch_dir("pipeline-cache").string();
  return o;
}

struct VkFixture {
  VkFixture() = default;
  ~VkFixture() { finish(); }

  // Creates the context with `options` (call before the first use of ctx() to change them).
  Context& ctx(const ContextOptions& options) {
    if (!context_) {
      warnings_ = std::make_shared<std::vector<std::string>>();
      ContextOptions o = options;
      auto sink = warnings_;
      o.on_warning = [sink](const std::string& m) { sink->push_back(m); };
      context_ = Context::create(-1, o);
      log_ = context_->validation_log();
      log_->echo = true;
    }
    return *context_;
  }
  Context& ctx() { return context_ ? *context_ : ctx(test_options()); }
  Allocator& alloc() {
    if (!allocator_) allocator_ = std::make_unique<Allocator>(ctx());
    return *allocator_;
  }
  Pipelines& pipes() {
    if (!pipelines_) pipelines_ = std::make_unique<Pipelines>(ctx());
    return *pipelines_;
  }
  // A transfer ring with a small chunk, so multi-chunk paths run on small buffers.
  Transfer& xfer(TransferOptions options = {4096, 2}) {
    if (!transfer_) transfer_ = std::make_unique<Transfer>(ctx(), alloc(), options);
    return *transfer_;
  }
  const std::vector<std::string>& warnings() const { return *warnings_; }
  bool validation() const { return context_ && context_->instance().validation_enabled(); }

  // Tears everything down and checks that the validation layer stayed silent throughout.
  void finish() {
    transfer_.reset();
    pipelines_.reset();
    allocator_.reset();
    context_.reset();
    if (log_) {
      const auto messages = log_->messages();
      CHECK_MESSAGE(messages.empty(), messages.size() << " validation message(s), first: "
                                                      << (messages.empty() ? "" : messages.front()));
      log_.reset();
    }
  }

private:
  std::unique_ptr<Context> context_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Pipelines> pipelines_;
  std::unique_ptr<Transfer> transfer_;
  std::shared_ptr<ValidationLog> log_;
  std::shared_ptr<std::vector<std::string>> warnings_ = std::make_shared<std::vector<std::string>>();
};

// Runs one dispatch of `pipeline` to completion.
inline void run_dispatch(Context& ctx, const ComputePipeline& pipeline, std::initializer_list<BufferSpan> buffers,
                         std::span<const std::byte> push, std::array<uint32_t, 3> groups) {
  RecordedSequence seq(ctx, "test dispatch");
  seq.record([&](Recorder& r) { r.dispatch(pipeline, buffers, push, groups); });
  seq.run();
}

}  // namespace greta::vk::test
