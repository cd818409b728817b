#pragma once

// The admin CLI's exit codes: what happened, for scripts (docs/cli.md).

namespace oncegate::cli {

/// Process exit codes of `oncegate keys|cluster ...`.
enum class exit_code : int {
  /// The node did it (2xx).
  ok = 0,
  /// The node refused the request for another reason (400, 405, 413, 415,
  /// 422, 500, any other status not below).
  refused = 1,
  /// The command line is wrong; nothing was sent.
  usage = 2,
  /// No such record, route or endpoint (404).
  not_found = 3,
  /// The record's or the cluster's state does not allow it (409).
  conflict = 4,
  /// No usable answer: connection refused or reset, a timeout, a malformed
  /// or oversized answer, or the node (or a proxy) is unavailable (502,
  /// 503, 504).
  unavailable = 5,
  /// The node refused the credentials or the caller (401, 403).
  auth = 6,
};

/// The exit code for an HTTP answer with `status`.
constexpr exit_code exit_for_status(int status) {
  if (status >= 200 && status < 300)
    return exit_code::ok;
  switch (status) {
    case 401:
    case 403:
      return exit_code::auth;
    case 404:
      return exit_code::not_found;
    case 409:
      return exit_code::conflict;
    case 502:
    case 503:
    case 504:
      return exit_code::unavailable;
    default:
      return exit_code::refused;
  }
}

/// As the process's exit status.
constexpr int to_int(exit_code c) {
  return static_cast<int>(c);
}

} // namespace oncegate::cli
