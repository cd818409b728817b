#pragma once

// Shared test helpers: a CAF config with oncegate's types, temporary
// directories, and a way to collect replies under the deterministic test
// scheduler (a blocking receive would never see its reply there).

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/expected.hpp>

#include <sqlite3.h>

#include "actors/messages.hpp"
#include "common/record.hpp"
#include "common/sha256.hpp"

namespace oncegate::test {

struct test_config : caf::actor_system_config {
  test_config() {
    register_types(*this);
  }
};

/// A fresh directory under $TMPDIR, removed with everything in it.
class temp_dir {
public:
  temp_dir() {
    auto base = std::filesystem::temp_directory_path() / "oncegate-test-XXXXXX";
    std::string tmpl = base.string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      std::abort();
    path_ = tmpl;
  }

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const {
    return path_;
  }

  std::string file(const std::string& name) const {
    return (path_ / name).string();
  }

private:
  std::filesystem::path path_;
};

/// A reply that arrives later: empty until the scheduler delivered it.
template <class T>
using reply_slot = std::shared_ptr<std::optional<caf::expected<T>>>;

/// Sends a request from a fresh client actor and stores its reply in the
/// returned slot once the scheduler runs.
template <class T, class Handle, class... Ts>
reply_slot<T> ask(caf::actor_system& sys, const Handle& hdl, Ts... xs) {
  auto slot = std::make_shared<std::optional<caf::expected<T>>>();
  sys.spawn([=](caf::event_based_actor* client) {
    client->request(hdl, caf::infinite, xs...)
      .then([=](T& res) { *slot = std::move(res); },
            [=](caf::error& err) { *slot = std::move(err); });
  });
  return slot;
}

/// Makes COMMIT itself fail, for tests of what a failed COMMIT does (a page
/// cap fails at the INSERT, before COMMIT is ever reached). While one lives,
/// every SQLite connection opened in this process gets a commit hook (an
/// auto extension: no product seam); once armed with `fail_next`, the hook
/// turns that many COMMITs into rollbacks, and sqlite3_step of COMMIT
/// answers SQLITE_CONSTRAINT_COMMITHOOK. Open the store after constructing
/// it, and arm it after the store's own set-up committed.
class commit_fault {
public:
  commit_fault() {
    armed() = 0;
    failed() = 0;
    sqlite3_auto_extension(reinterpret_cast<void (*)()>(&install));
  }

  ~commit_fault() {
    sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(&install));
    armed() = 0;
  }

  commit_fault(const commit_fault&) = delete;
  commit_fault& operator=(const commit_fault&) = delete;

  /// Fails the next `n` COMMITs of any connection opened since.
  void fail_next(int n = 1) {
    armed() = n;
  }

  /// COMMITs failed so far.
  int failures() const {
    return failed();
  }

private:
  static int& armed() {
    static int n = 0;
    return n;
  }

  static int& failed() {
    static int n = 0;
    return n;
  }

  static int hook(void*) {
    if (armed() <= 0)
      return 0;
    --armed();
    ++failed();
    return 1; // non-zero: this COMMIT becomes a ROLLBACK
  }

  static int install(sqlite3* db, const char**, const sqlite3_api_routines*) {
    sqlite3_commit_hook(db, &hook, nullptr);
    return SQLITE_OK;
  }
};

/// Builds a claim of `key` on route `r` with payload text `body`.
inline claim_request make_claim(const std::string& key, int64_t now_ms,
                                const std::string& body = "{}",
                                int64_t ttl_ms = 60'000,
                                const std::string& r = "default") {
  claim_request req;
  req.route = r;
  req.key = key;
  req.fingerprint = sha256(body);
  req.now_ms = now_ms;
  req.ttl_ms = ttl_ms;
  req.initial_state = record_state::completed;
  req.status = 200;
  req.response = "{\"status\":\"accepted\"}";
  req.signal = body;
  return req;
}

} // namespace oncegate::test
