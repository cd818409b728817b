#include "tests/mutants/commit_fault.hpp"

#include <cstdlib>
#include <string>
#include <sqlite3.h>
#include <unistd.h>

namespace oncegate::test {

namespace {

const std::string& fault_file() {
  static const std::string path = [] {
    auto v = std::getenv("ONCEGATE_COMMIT_FAULT_FILE");
    return std::string{v != nullptr ? v : ""};
  }();
  return path;
}

int hook(void*) {
  // Non-zero turns this COMMIT into a ROLLBACK.
  return ::access(fault_file().c_str(), F_OK) == 0 ? 1 : 0;
}

int install(sqlite3* db, const char**, const sqlite3_api_routines*) {
  sqlite3_commit_hook(db, &hook, nullptr);
  return SQLITE_OK;
}

} // namespace

bool install_commit_fault_from_env() {
  if (fault_file().empty())
    return true;
  return sqlite3_auto_extension(reinterpret_cast<void (*)()>(&install))
         == SQLITE_OK;
}

} // namespace oncegate::test
