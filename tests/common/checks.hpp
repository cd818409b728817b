#pragma once

// Table-driven checks for the CAF unit tests: a function under test and the
// rows of what it gives for each input, one CAF_CHECK_EQUAL per row. A row
// that fails is named (its input, made printable) at the default verbosity,
// so a table says as much on a failure as the list of checks it replaces.

#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "caf/test/unit_test.hpp"

namespace oncegate::test {

/// `text` with backslashes doubled and every byte outside printable ASCII
/// written as \xNN.
inline std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto b = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (b >= 0x20 && b < 0x7f) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", b);
      out += hex;
    }
  }
  return out;
}

/// An input and what the function under test gives for it.
template <class Out>
using row = std::pair<std::string_view, Out>;

/// Checks `f(input) == expected` for every row of `rows`.
template <class Out = std::string_view, class F>
void check_rows(F f, std::initializer_list<row<Out>> rows) {
  auto& current = *caf::test::engine::current_test();
  for (const auto& [input, expected] : rows) {
    auto failures = current.bad();
    CAF_CHECK_EQUAL(f(input), expected);
    if (current.bad() > failures)
      CAF_TEST_PRINT_INFO("failed row: input \"" << printable(input) << '"');
  }
}

} // namespace oncegate::test
