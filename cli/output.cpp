#include "cli/output.hpp"

#include <algorithm>
#include <cstdint>

#include <boost/json/serialize.hpp>

namespace oncegate::cli {

namespace {

// The length of the UTF-8 sequence at `s[i]` and its code point, or 0
// when the bytes there are not one (overlong forms and surrogates too).
std::size_t utf8_at(std::string_view s, std::size_t i, uint32_t& cp) {
  auto b = static_cast<unsigned char>(s[i]);
  std::size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3
                                 : (b >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > s.size())
    return 0;
  cp = len == 1 ? b : len == 2 ? (b & 0x1fu) : len == 3 ? (b & 0x0fu) : (b & 0x07u);
  for (std::size_t k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c >> 6) != 0x2)
      return 0;
    cp = (cp << 6) | (c & 0x3fu);
  }
  static constexpr uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

// Code points shown escaped: controls (C0, DEL, C1) and the invisible or
// reordering ones (zero-width, bidi embeddings, overrides and isolates,
// line and paragraph separators, byte order mark).
bool hidden(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0xad
         || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e)
         || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff;
}

void append_hex(std::string& out, uint32_t value, int digits) {
  static constexpr char hex[] = "0123456789abcdef";
  for (int d = digits - 1; d >= 0; --d)
    out += hex[(value >> (4 * d)) & 0xf];
}

bool plain(std::string_view s) {
  if (s.empty())
    return false;
  for (std::size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    auto len = utf8_at(s, i, cp);
    if (len == 0 || hidden(cp) || cp == ' ' || cp == '"' || cp == '\\')
      return false;
    i += len;
  }
  return true;
}

// Code points in `s` (its width on most terminals, wide characters aside).
std::size_t width(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  }));
}

void pad(std::ostream& out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out << ' ';
}

// Appends `text` with every byte that is not plain UTF-8, every hidden
// code point and (when `quoted`) quotes and backslashes escaped.
void append_escaped(std::string& out, std::string_view text, bool quoted) {
  for (std::size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    auto len = utf8_at(text, i, cp);
    if (len == 0) {
      out += "\\x";
      append_hex(out, static_cast<unsigned char>(text[i]), 2);
      ++i;
      continue;
    }
    if (!quoted && (cp == '"' || cp == '\\')) {
      out += static_cast<char>(cp);
      i += len;
      continue;
    }
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (hidden(cp)) {
          out += "\\u";
          append_hex(out, cp, 4);
        } else {
          out.append(text.substr(i, len));
        }
    }
    i += len;
  }
}

} // namespace

std::string display(std::string_view text) {
  if (plain(text))
    return std::string{text};
  std::string out = "\"";
  append_escaped(out, text, true);
  out += '"';
  return out;
}

std::string safe_text(std::string_view text) {
  std::string out;
  append_escaped(out, text, false);
  return out;
}

std::string safe_text_cut(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes)
    return safe_text(text);
  auto cut = max_bytes;
  // Back to the start of a character (at most 3 continuation bytes).
  for (int k = 0; k < 3 && cut > 0
                  && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80;
       ++k)
    --cut;
  return safe_text(text.substr(0, cut)) + " ... (" + std::to_string(text.size())
         + " bytes in all; --json shows them)";
}

std::string member_cell(const boost::json::object& obj,
                        std::string_view name) {
  auto it = obj.find(name);
  return it == obj.end() ? std::string{"-"} : cell(it->value());
}

std::string cell(const boost::json::value& v) {
  if (auto s = v.if_string())
    return display(std::string_view{s->data(), s->size()});
  if (v.is_null())
    return "-";
  return display(boost::json::serialize(v));
}

table::table(std::vector<std::string> header) : header_(std::move(header)) {
  // nop
}

void table::add(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void table::print(std::ostream& out) const {
  std::vector<std::size_t> widths;
  for (auto& h : header_)
    widths.push_back(width(h));
  for (auto& row : rows_)
    for (std::size_t c = 0; c < row.size(); ++c)
      widths[c] = std::max(widths[c], width(row[c]));
  auto line = [&](const std::vector<std::string>& row) {
    std::string text;
    for (std::size_t c = 0; c < row.size(); ++c) {
      text += row[c];
      if (c + 1 < row.size())
        text.append(widths[c] - width(row[c]) + 2, ' ');
    }
    // Empty cells at the end leave no trailing blanks.
    text.erase(text.find_last_not_of(' ') + 1);
    out << text << '\n';
  };
  line(header_);
  for (auto& row : rows_)
    line(row);
}

void print_fields(
  std::ostream& out,
  const std::vector<std::pair<std::string, std::string>>& fields) {
  std::size_t name_width = 0;
  for (auto& [name, value] : fields)
    name_width = std::max(name_width, width(name));
  for (auto& [name, value] : fields) {
    out << name;
    pad(out, name_width - width(name) + 2);
    out << value << '\n';
  }
}

} // namespace oncegate::cli
