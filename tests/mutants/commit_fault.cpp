#include "tests/mutants/commit_fault.hpp"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <sqlite3.h>
#include <unistd.h>

namespace oncegate::test {

namespace {

std::string env_path(const char* name) {
  auto v = std::getenv(name);
  return std::string{v != nullptr ? v : ""};
}

const std::string& fault_file() {
  static const std::string path = env_path("ONCEGATE_COMMIT_FAULT_FILE");
  return path;
}

const std::string& hold_file() {
  static const std::string path = env_path("ONCEGATE_COMMIT_HOLD_FILE");
  return path;
}

bool exists(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), F_OK) == 0;
}

int hook(void*) {
  // A disk that stalls: the COMMIT waits while the hold file exists (at
  // most two minutes, so a test that forgets it cannot hang the node).
  auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (exists(hold_file()) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  // Non-zero turns this COMMIT into a ROLLBACK.
  return exists(fault_file()) ? 1 : 0;
}

int install(sqlite3* db, const char**, const sqlite3_api_routines*) {
  sqlite3_commit_hook(db, &hook, nullptr);
  return SQLITE_OK;
}

} // namespace

bool install_commit_fault_from_env() {
  if (fault_file().empty() && hold_file().empty())
    return true;
  return sqlite3_auto_extension(reinterpret_cast<void (*)()>(&install))
         == SQLITE_OK;
}

} // namespace oncegate::test
