#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>

namespace oncegate {

/// The one way an enum of this code base is named and parsed: a table of
/// names indexed by the value (every enum here counts from 0 without gaps;
/// each table sits beside its `to_string` with a `static_assert` that it
/// covers the last enumerator). A value outside the table (a cast from an
/// untrusted integer) is named "unknown" and is not `enum_in_range`.
template <class E, std::size_t N>
constexpr bool enum_in_range(std::underlying_type_t<E> raw,
                             const char* const (&)[N]) noexcept {
  return raw >= 0 && static_cast<std::size_t>(raw) < N;
}

template <class E, std::size_t N>
constexpr const char* enum_text(E x, const char* const (&names)[N]) noexcept {
  auto raw = static_cast<std::underlying_type_t<E>>(x);
  return enum_in_range<E>(raw, names) ? names[raw] : "unknown";
}

/// The value named `name` in `names`, or none.
template <class E, std::size_t N>
constexpr std::optional<E> enum_from_text(std::string_view name,
                                          const char* const (&names)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    if (name == names[i])
      return static_cast<E>(i);
  return std::nullopt;
}

/// Whether `table` has one entry (a name, or whatever the table maps to)
/// per enumerator up to and including `last`.
template <class E, class T, std::size_t N>
constexpr bool enum_table_covers(E last, const T (&)[N]) noexcept {
  return static_cast<std::size_t>(last) + 1 == N;
}

} // namespace oncegate
