// preload: fills an oncegate database with N completed records, for the
// benchmarks that need a large store (10M keys) or many expired records
// (purge under load). Writes through the store's own API in large
// transactions; keys are `<prefix><i>` on route `default`.
//
//   preload --data-dir=DIR --count=10000000 [--prefix=p-] [--expired]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/clock.hpp"
#include "common/sha256.hpp"
#include "persistence/sqlite_store.hpp"

using namespace oncegate;

int main(int argc, char** argv) {
  std::string dir = "./data";
  std::string prefix = "p-";
  long long count = 1'000'000;
  bool expired = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      auto n = std::strlen(name);
      return arg.compare(0, n, name) == 0 ? argv[i] + n : nullptr;
    };
    if (auto v = value("--data-dir="))
      dir = v;
    else if (auto v = value("--count="))
      count = std::atoll(v);
    else if (auto v = value("--prefix="))
      prefix = v;
    else if (arg == "--expired")
      expired = true;
    else {
      std::fprintf(stderr, "usage: preload --data-dir=DIR --count=N "
                           "[--prefix=P] [--expired]\n");
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  persistence::store_options opts;
  opts.path = (std::filesystem::path{dir} / "oncegate.db").string();
  auto db = persistence::sqlite_store::open(opts);
  if (!db) {
    std::fprintf(stderr, "cannot open %s\n", opts.path.c_str());
    return 1;
  }
  auto now = wall_clock_ms();
  claim_request req;
  req.route = "default";
  req.fingerprint = sha256("{}");
  req.status = 200;
  req.response = R"({"status":"accepted"})";
  req.signal = R"({"exchange":"BINANCE","symbol":"BTCUSDT","action":"buy"})";
  // Expired records expire within the last hour, spread out, so that the
  // alarm purges them oldest first in many chunks.
  req.ttl_ms = 24LL * 3600 * 1000;
  auto start = std::chrono::steady_clock::now();
  constexpr long long batch = 20'000;
  for (long long i = 0; i < count;) {
    if ((*db)->begin())
      return 1;
    for (long long j = 0; j < batch && i < count; ++j, ++i) {
      req.key = prefix + std::to_string(i);
      req.now_ms = expired ? now - req.ttl_ms - 3'600'000 + (i % 3'600'000)
                           : now;
      if (!(*db)->claim(req)) {
        std::fprintf(stderr, "insert failed at %lld\n", i);
        return 1;
      }
    }
    if ((*db)->commit())
      return 1;
  }
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - start)
                .count();
  std::printf("preloaded %lld records in %.1f s (%.0f/s)\n", count, secs,
              count / secs);
  return 0;
}
