#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace oncegate::log {

/// Creates (once) the per-component loggers `gateway`, `actors`, `store`
/// and `cluster`, writing to stderr at `level` ("trace" ... "off").
void init(const std::string& level);

/// Returns the logger of one component; falls back to a stderr logger when
/// `init` was not called (tests).
std::shared_ptr<spdlog::logger> gateway();
std::shared_ptr<spdlog::logger> actors();
std::shared_ptr<spdlog::logger> store();
std::shared_ptr<spdlog::logger> cluster();

} // namespace oncegate::log
