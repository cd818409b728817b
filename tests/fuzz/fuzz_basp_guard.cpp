// The BASP identity guard (routing/peer_basp.hpp) on streams of frames a
// member might send: handshakes, direct, routed, monitor and down messages,
// heartbeats, each in the member's own name or forged, and raw bytes, fed
// in chunks of fuzzer-chosen sizes. CAF's serializer writes the frames.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/basp/message_type.hpp>
#include <caf/node_id.hpp>

#include "routing/peer_basp.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using oncegate::tls::caf_node_of;
using oncegate::tls::detail::basp_guard;
using caf::io::basp::header;
using caf::io::basp::message_type;
using bytes = std::vector<char>;

namespace {

constexpr uint32_t limit = 4096;
constexpr uint64_t peer = 2;

template <class... Ts>
void put(bytes& out, const Ts&... xs) {
  caf::binary_serializer sink{nullptr, out};
  FUZZ_CHECK(!sink(const_cast<Ts&>(xs)...));
}

void frame(bytes& out, message_type op, const bytes& payload,
           uint64_t op_data, uint64_t src, uint64_t dst) {
  header hdr{op, 0, static_cast<uint32_t>(payload.size()), op_data, src, dst};
  put(out, hdr);
  out.insert(out.end(), payload.begin(), payload.end());
}

// What the model expects of the whole stream, unless raw bytes made it
// unknowable: the end of the first forged frame (0: none, everything must
// pass); the guard must refuse before that end, so that CAF, which acts on
// a frame once it has all of it, never holds a forged one.
struct model {
  bool knowable = true;
  bool handshaken = false;
  size_t refuse_by = 0;
};

// A message's content as CAF writes it: no forwarding stack, a u16 zero,
// the type names, some values.
void content(bytes& out, size_t values) {
  static const std::string types = "@<>+@atom+@str";
  out.insert(out.end(), {0, 0, 0, static_cast<char>(types.size())});
  out.insert(out.end(), types.begin(), types.end());
  out.resize(out.size() + values, 'v');
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in{data, size};
  auto self = caf_node_of(1, 100);
  auto own = caf_node_of(peer, in.ConsumeIntegral<uint16_t>() + 1);
  auto other = caf_node_of(in.ConsumeIntegralInRange<uint64_t>(3, 5), 300);
  bytes stream;
  model m;
  auto forged = [&](bool is_forged) {
    if (is_forged && m.knowable && m.refuse_by == 0)
      m.refuse_by = stream.size();
  };
  for (int n = 0; n < 16 && in.remaining_bytes() > 0; ++n) {
    auto kind = in.ConsumeIntegralInRange<int>(0, 6);
    auto liar = in.ConsumeBool();
    bytes payload;
    switch (kind) {
      case 0: { // handshake, client or server
        put(payload, liar ? other : own);
        if (in.ConsumeBool()) {
          std::vector<std::string> app_ids{"oncegate"};
          uint64_t aid = 10;
          std::set<std::string> iface;
          put(payload, app_ids, aid, iface);
          frame(stream, message_type::server_handshake, payload, 1, 0, 0);
        } else {
          frame(stream, message_type::client_handshake, payload, 0, 0, 0);
        }
        forged(liar);
        m.handshaken = m.handshaken || !liar;
        break;
      }
      case 1: { // direct message: a request, or (liar) an async one
        content(payload, in.ConsumeIntegralInRange<size_t>(0, 64));
        frame(stream, message_type::direct_message, payload, liar ? 0 : 7, 3,
              10);
        forged(liar || !m.handshaken);
        break;
      }
      case 2:
      case 3:
      case 4: { // routed, monitor, down
        auto op = kind == 2   ? message_type::routed_message
                  : kind == 3 ? message_type::monitor_message
                              : message_type::down_message;
        auto to_self = !(liar && in.ConsumeBool());
        put(payload, liar && to_self ? other : own, to_self ? self : other);
        if (op == message_type::routed_message)
          content(payload, in.ConsumeIntegralInRange<size_t>(0, 32));
        else
          payload.resize(payload.size()
                           + in.ConsumeIntegralInRange<size_t>(0, 32),
                         'x');
        frame(stream, op, payload, op == message_type::routed_message ? 7 : 0,
              op == message_type::monitor_message ? 0 : 4,
              op == message_type::down_message ? 0 : 10);
        forged(liar || !m.handshaken);
        break;
      }
      case 5: // heartbeat
        frame(stream, message_type::heartbeat, {}, 0, 0, 0);
        break;
      default: { // raw bytes: anything may happen from here on
        auto raw = in.ConsumeBytes<char>(in.ConsumeIntegralInRange<size_t>(0, 48));
        stream.insert(stream.end(), raw.begin(), raw.end());
        m.knowable = false;
        break;
      }
    }
  }
  basp_guard whole{peer, self, limit};
  auto whole_why = whole.feed(stream.data(), stream.size());
  basp_guard chunked{peer, self, limit};
  std::string chunked_why;
  size_t pos = 0;
  size_t passed = stream.size();
  while (pos < stream.size() && chunked_why.empty()) {
    auto n = std::min(stream.size() - pos,
                      in.ConsumeIntegralInRange<size_t>(1, 40));
    chunked_why = chunked.feed(stream.data() + pos, n);
    if (!chunked_why.empty())
      passed = pos;
    pos += n;
  }
  // Any split gives the same verdict, and after a refusal nothing passes.
  FUZZ_CHECK(whole_why == chunked_why);
  if (!whole_why.empty())
    FUZZ_CHECK(chunked.feed("x", 1) == whole_why);
  if (!m.knowable)
    return 0;
  if (m.refuse_by == 0) {
    FUZZ_CHECK(whole_why.empty());
  } else {
    FUZZ_CHECK(!whole_why.empty());
    FUZZ_CHECK(passed < m.refuse_by);
  }
  return 0;
}
