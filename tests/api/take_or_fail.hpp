#pragma once

// The api's parsers answer a variant: a value or a rejection. A test that
// expects one of the two takes it out with `take_or_fail` (not
// `expect`: CAF's test DSL has one, for messages); when the other came
// back, the test fails and says what that was.

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "caf/test/unit_test.hpp"

#include "api/idempotency_key.hpp"
#include "api/payload.hpp"
#include "api/rejection.hpp"

namespace oncegate::test {

inline const std::string& describe(const std::string& key) {
  return key;
}

inline const std::string& describe(const gateway::idempotency_key& key) {
  return key.value;
}

inline const std::string& describe(const gateway::payload& body) {
  return body.canonical;
}

inline const std::string& describe(const gateway::rejection& r) {
  return r.detail;
}

/// The `T` in `result`; anything else fails the test with `unexpected`
/// followed by a description of what came instead.
template <class T, class... Ts>
T take_or_fail(std::variant<Ts...> result, std::string_view unexpected) {
  if (auto x = std::get_if<T>(&result))
    return std::move(*x);
  auto other = std::visit([](const auto& x) { return describe(x); }, result);
  CAF_FAIL(unexpected << ": " << other);
}

} // namespace oncegate::test
