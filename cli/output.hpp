#pragma once

// The admin CLI's human-readable output: text made safe for a terminal,
// aligned tables, name/value lists, JSON values as table cells. Whatever
// the node sends is shown escaped: a record's key or stored answer must not
// be able to move the cursor, change colours or reorder text (bidi
// controls) on an operator's terminal.

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

namespace oncegate::cli {

/// `text` as is when it is non-empty printable UTF-8 without spaces or
/// quotes; else in double quotes with JSON-style escapes (`\n`, `\"`,
/// `\u202e`) and `\xNN` for bytes that are not UTF-8.
std::string display(std::string_view text);

/// `text` with what `display` escapes escaped, but unquoted and with its
/// spaces: a message line (a problem's `detail`).
std::string safe_text(std::string_view text);

/// `safe_text` of at most the first `max_bytes` of `text` (cut at a
/// character), followed by a note of the whole size when it was cut: a
/// stored answer on the last column of a line.
std::string safe_text_cut(std::string_view text, std::size_t max_bytes);

/// A JSON value as a cell: strings through `display`, numbers and
/// booleans as JSON, null as `-`, arrays and objects as compact JSON.
std::string cell(const boost::json::value& v);

/// Member `name` of `obj` as a cell; `-` when there is none.
std::string member_cell(const boost::json::object& obj, std::string_view name);

/// Columns aligned on the widest cell.
class table {
public:
  explicit table(std::vector<std::string> header);

  void add(std::vector<std::string> row);

  std::size_t rows() const {
    return rows_.size();
  }

  void print(std::ostream& out) const;

private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

/// `name  value` lines, the values aligned.
void print_fields(std::ostream& out,
                  const std::vector<std::pair<std::string, std::string>>& fields);

} // namespace oncegate::cli
