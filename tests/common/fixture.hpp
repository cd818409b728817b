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
