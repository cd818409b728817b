#pragma once

// The admin CLI in the `oncegate` binary: `oncegate keys ...`,
// `oncegate cluster ...`, `oncegate help`. A client of a running node's
// admin API (docs/http-api.md), documented in docs/cli.md. The thin main
// (tools/oncegate.cpp) asks `wants_admin_cli` and runs either this or the
// node.

#include <string_view>

namespace oncegate::cli {

/// True when the command line is for the admin CLI rather than for a
/// node: its first argument is `keys`, `cluster` or `help`, or one of the
/// CLI's own options (`--node`, `--token`, `--token-file`, `--timeout`,
/// `--json`), which no node takes.
bool wants_admin_cli(int argc, char** argv);

/// Runs one admin command against a node and returns the process exit code
/// (`cli/exit_code.hpp`, docs/cli.md). Overwrites the value of a `--token`
/// in `argv` once read, so that it is visible in `ps` only briefly.
int run_admin_cli(int argc, char** argv, std::string_view version);

} // namespace oncegate::cli
