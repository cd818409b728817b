// The switch of the mutant build (common/mutant.hpp): which mutation point
// is active, from ONCEGATE_MUTANT, and a trace of its being reached.
#include "tests/mutants/mutant.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace oncegate::mutant {

namespace {

const char* selected() {
  static const char* name = [] {
    auto v = std::getenv("ONCEGATE_MUTANT");
    return v != nullptr && *v != '\0' ? v : nullptr;
  }();
  return name;
}

std::atomic<bool> traced{false};

} // namespace

const char* const* known() {
  static const char* const names[] = {
    "skip-fsync",        "quiet-ack",          "ack-before-commit",
    "ignore-commit-result", "grant-on-mismatch", "answer-before-majority",
    "drop-request-id",   "connect-timeout-in-doubt", "tls-handshake-in-doubt",
    "skip-key-reset",
    "log-request-body",  "reconcile-4xx-absent", "forward-after-timeout",
    "relay-unrecorded",
    nullptr};
  return names;
}

bool valid(const char* name) {
  for (auto p = known(); *p != nullptr; ++p)
    if (std::strcmp(*p, name) == 0)
      return true;
  return false;
}

const char* current() {
  return selected();
}

bool active(const char* name) {
  auto sel = selected();
  if (sel == nullptr || std::strcmp(sel, name) != 0)
    return false;
  if (!traced.exchange(true)) {
    // Async-signal-safe enough and cheap: once per process.
    if (auto path = std::getenv("ONCEGATE_MUTANT_TRACE")) {
      auto fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        auto n = std::strlen(name);
        [[maybe_unused]] auto w1 = ::write(fd, name, n);
        [[maybe_unused]] auto w2 = ::write(fd, "\n", 1);
        ::close(fd);
      }
    }
  }
  return true;
}

} // namespace oncegate::mutant
