#pragma once

// OpenSSL helpers shared by the TLS code of http/ (the listener's context,
// `http/server_tls.*`; the upstream client's, `http/upstream_tls.*`):
// OpenSSL's error reason, and reading a PEM file from outside with a bound.
// No contexts and no connections here.

#include <cstddef>
#include <string>

namespace oncegate::gateway::detail {

/// OpenSSL's reason for the oldest error on this thread's queue (the cause;
/// later entries wrap it), then the queue emptied so that no later call on
/// this thread mistakes it for its own. `first`, when given, receives the
/// error code (0: the queue was empty, "unknown error").
std::string openssl_reason(unsigned long* first = nullptr);

/// Reads the whole file `path` into `out` when it holds at most `limit`
/// bytes. False, with `error` saying why (`cannot read PATH: No such file
/// or directory`, `PATH is larger than 1048576 bytes`), otherwise; a FIFO
/// or a device is read up to the bound too, never further.
bool read_bounded_file(const std::string& path, std::size_t limit,
                       std::string& out, std::string& error);

} // namespace oncegate::gateway::detail
