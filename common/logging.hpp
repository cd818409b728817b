#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace oncegate::log {

/// Where and how the node logs.
struct log_options {
  /// Level of every component: trace, debug, info, warn, error, critical,
  /// off.
  std::string level = "info";
  /// Per-component levels overriding `level`, e.g. `store=debug,cluster=warn`
  /// (components: gateway, actors, store, cluster).
  std::string levels;
  /// `text` (one line per event) or `json` (one JSON object per line with
  /// `ts`, `level`, `component` and `msg`).
  std::string format = "text";
  /// Also write to this file, rotated at `file_size` bytes keeping
  /// `file_count` old files (empty: stderr only).
  std::string file;
  std::size_t file_size = 64 * 1024 * 1024;
  std::size_t file_count = 5;
};

/// Checks `opts` without applying them: an empty string when valid, else a
/// message naming the bad value.
std::string check(const log_options& opts);

/// Configures the per-component loggers `gateway`, `actors`, `store` and
/// `cluster` (stderr, plus the file when set). Returns an error message
/// when the file cannot be opened or a value is invalid.
std::string init(const log_options& opts);

/// Shorthand: every component at `level`, text on stderr.
void init(const std::string& level);

/// Returns the logger of one component; falls back to a stderr logger when
/// `init` was not called (tests).
std::shared_ptr<spdlog::logger> gateway();
std::shared_ptr<spdlog::logger> actors();
std::shared_ptr<spdlog::logger> store();
std::shared_ptr<spdlog::logger> cluster();

} // namespace oncegate::log
