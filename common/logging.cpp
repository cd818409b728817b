#include "common/logging.hpp"

#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>

namespace oncegate::log {

namespace {

std::shared_ptr<spdlog::logger> get(const char* name) {
  static std::mutex mtx;
  std::lock_guard<std::mutex> guard{mtx};
  if (auto lg = spdlog::get(name))
    return lg;
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto lg = std::make_shared<spdlog::logger>(name, sink);
  lg->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l [%n] %v");
  lg->set_level(spdlog::get_level());
  spdlog::register_logger(lg);
  return lg;
}

} // namespace

void init(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
  for (auto name : {"gateway", "actors", "store", "cluster"})
    get(name)->set_level(spdlog::get_level());
}

// Looked up once: spdlog's registry takes a mutex per lookup, and these are
// called on every request.
std::shared_ptr<spdlog::logger> gateway() {
  static auto lg = get("gateway");
  return lg;
}

std::shared_ptr<spdlog::logger> actors() {
  static auto lg = get("actors");
  return lg;
}

std::shared_ptr<spdlog::logger> store() {
  static auto lg = get("store");
  return lg;
}

std::shared_ptr<spdlog::logger> cluster() {
  static auto lg = get("cluster");
  return lg;
}

} // namespace oncegate::log
