#define CAF_SUITE routing.peer_basp
#include "caf/test/unit_test.hpp"

// The BASP identity guard (routing/peer_basp.hpp) on frames written by
// CAF's own serializer, as CAF 0.17's BASP instance writes them: what a
// member may send on its connection, and every way it could speak as
// another node. Each stream is fed whole and one byte at a time (TLS hands
// CAF the bytes in any split); a refusal must come no later than the last
// byte of the node id it is about, so CAF never holds a whole forged frame.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/basp/message_type.hpp>
#include <caf/node_id.hpp>
#include <caf/expected.hpp>
#include <caf/uri.hpp>

#include "routing/peer_basp.hpp"

using namespace oncegate::tls;
using caf::io::basp::header;
using caf::io::basp::message_type;
using bytes = std::vector<char>;

namespace {

constexpr uint32_t limit = 1 << 20;

template <class... Ts>
bytes serialized(const Ts&... xs) {
  bytes out;
  caf::binary_serializer sink{nullptr, out};
  if (auto err = sink(const_cast<Ts&>(xs)...))
    CAF_FAIL("cannot serialize");
  return out;
}

bytes frame(message_type op, const bytes& payload, uint64_t op_data = 0,
            uint64_t src = 0, uint64_t dst = 0, uint8_t flags = 0) {
  header hdr{op, flags, static_cast<uint32_t>(payload.size()), op_data, src,
             dst};
  auto out = serialized(hdr);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

bytes client_handshake(const caf::node_id& who) {
  return frame(message_type::client_handshake, serialized(who));
}

bytes server_handshake(const caf::node_id& who) {
  std::vector<std::string> app_ids{"oncegate"};
  uint64_t aid = 10;
  std::set<std::string> iface;
  return frame(message_type::server_handshake,
               serialized(who, app_ids, aid, iface), 1);
}

// A message's content as CAF writes it after the node ids: the forwarding
// stack (`stages` entries; only the count matters here), a u16 zero, the
// type names, then the values (not looked at).
bytes content(const std::string& types = "@<>+@atom+@str", uint8_t stages = 0) {
  bytes out{static_cast<char>(stages), 0, 0};
  auto n = types.size();
  while (n > 0x7f) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  out.insert(out.end(), types.begin(), types.end());
  out.resize(out.size() + 16, 'v');
  return out;
}

// A request id (normal category), and the id of its answer.
constexpr uint64_t request_id = 0x1000000000000007;
constexpr uint64_t answer_id = 0x9000000000000007;

bytes between(message_type op, const caf::node_id& from,
              const caf::node_id& to, uint64_t src, uint64_t dst) {
  auto payload = serialized(from, to);
  uint64_t mid = 0;
  if (op == message_type::routed_message) {
    auto c = content();
    payload.insert(payload.end(), c.begin(), c.end());
    mid = request_id;
  } else {
    payload.resize(payload.size() + 24, 'x'); // what follows: not checked
  }
  return frame(op, payload, mid, src, dst);
}

bytes direct(uint64_t dst, uint64_t mid = request_id,
             const bytes& body = content(), uint8_t flags = 0) {
  return frame(message_type::direct_message, body, mid, 3, dst, flags);
}

bytes heartbeat() {
  return frame(message_type::heartbeat, {});
}

bytes operator+(bytes x, const bytes& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

struct outcome {
  std::string why;
  /// Bytes accepted before the refusal (all of them if none).
  size_t passed = 0;
};

// One byte at a time: the reason and how many bytes passed first.
outcome bytewise(uint64_t peer, const caf::node_id& self, const bytes& in) {
  detail::basp_guard guard{peer, self, limit};
  for (size_t i = 0; i < in.size(); ++i)
    if (auto why = guard.feed(&in[i], 1); !why.empty())
      return {why, i};
  return {{}, in.size()};
}

std::string whole(uint64_t peer, const caf::node_id& self, const bytes& in) {
  detail::basp_guard guard{peer, self, limit};
  return guard.feed(in.data(), in.size());
}

struct fixture {
  caf::node_id self = caf_node_of(1, 100);
  caf::node_id peer = caf_node_of(2, 200);
  caf::node_id other = caf_node_of(3, 300);

  // Refused both ways, for a reason containing `what`, and the byte-wise
  // feed stopped at or before `at` (the last byte that decides).
  void refused(const bytes& in, const std::string& what, size_t at) {
    auto w = whole(2, self, in);
    CAF_CHECK_NOT_EQUAL(w.find(what), std::string::npos);
    auto b = bytewise(2, self, in);
    CAF_CHECK_EQUAL(b.why, w);
    CAF_CHECK_LESS_OR_EQUAL(b.passed, at);
    if (w.find(what) == std::string::npos)
      CAF_MESSAGE("refused for: " << w);
  }
};

constexpr size_t hdr = caf::io::basp::header_size;
constexpr size_t nid = 32; // a node id of CAF's default kind, serialized

} // namespace

CAF_TEST_FIXTURE_SCOPE(peer_basp_tests, fixture)

CAF_TEST(the host id names the member and differs between members) {
  CAF_CHECK(caf_host_id(1) == caf_host_id(1));
  CAF_CHECK(caf_host_id(1) != caf_host_id(2));
  CAF_CHECK(caf::node_id::default_data::valid(caf_host_id(7)));
  CAF_CHECK_EQUAL(serialized(peer).size(), nid);
}

CAF_TEST(a member speaking in its own name passes in any split) {
  for (auto& hs : {client_handshake(peer), server_handshake(peer)}) {
    auto in = hs + heartbeat() + direct(10) + hs
              + between(message_type::routed_message, peer, self, 4, 10)
              + between(message_type::monitor_message, peer, self, 0, 10)
              + between(message_type::down_message, peer, self, 4, 0)
              + direct(11);
    CAF_CHECK_EQUAL(whole(2, self, in), "");
    auto b = bytewise(2, self, in);
    CAF_CHECK_EQUAL(b.why, "");
    CAF_CHECK_EQUAL(b.passed, in.size());
  }
  // Any pid: a restarted member is the same member.
  CAF_CHECK_EQUAL(whole(2, self, client_handshake(caf_node_of(2, 9))), "");
}

CAF_TEST(a handshake in the name of another member is refused) {
  refused(client_handshake(other), "which is not node 2's", hdr + nid - 1);
  refused(server_handshake(other), "which is not node 2's", hdr + nid - 1);
  // This node's own id (the pid of this process, this node's host).
  refused(client_handshake(self), "which is not node 2's", hdr + nid - 1);
  // CAF's own kind of id (hash of the host's MAC addresses).
  caf::node_id::default_data::host_id_type host{};
  host.fill(0x5a);
  refused(client_handshake(caf::make_node_id(200, host)),
          "which is not node 2's", hdr + nid - 1);
}

CAF_TEST(a second handshake as another incarnation is refused) {
  auto in = client_handshake(peer) + direct(10)
            + client_handshake(caf_node_of(2, 201));
  refused(in, "after a handshake as", in.size() - 1);
}

CAF_TEST(an id of another kind is refused) {
  auto u = caf::make_uri("tcp://node-2.oncegate:1");
  CAF_REQUIRE(u);
  auto in = client_handshake(caf::make_node_id(*u));
  auto w = whole(2, self, in);
  CAF_CHECK_NOT_EQUAL(w, "");
}

CAF_TEST(messages before a handshake are refused) {
  refused(direct(10), "before a handshake", hdr - 1);
  refused(between(message_type::routed_message, peer, self, 4, 10),
          "before a handshake", hdr - 1);
  refused(between(message_type::down_message, peer, self, 4, 0),
          "before a handshake", hdr - 1);
}

CAF_TEST(routed monitor and down messages in the name of another node are refused) {
  auto hs = client_handshake(peer);
  auto base = hs.size() + hdr;
  for (auto op : {message_type::routed_message, message_type::monitor_message,
                  message_type::down_message}) {
    uint64_t src = op == message_type::monitor_message ? 0 : 4;
    uint64_t dst = op == message_type::down_message ? 0 : 10;
    CAF_MESSAGE(caf::io::basp::to_string(op));
    // Refused before the frame's last byte passes (for a routed message
    // the guard reads its content's types too).
    auto forged = hs + between(op, other, self, src, dst);
    refused(forged, "not this connection's",
            op == message_type::routed_message ? forged.size() - 1
                                               : base + 2 * nid - 1);
    // Relaying: to a third node.
    auto relayed = hs + between(op, peer, other, src, dst);
    refused(relayed, "not this node",
            op == message_type::routed_message ? relayed.size() - 1
                                               : base + 2 * nid - 1);
  }
}

CAF_TEST(invalid headers oversized and short payloads are refused) {
  auto hs = client_handshake(peer);
  // Operation 9 does not exist.
  auto bad = heartbeat();
  bad[0] = 9;
  refused(hs + bad, "invalid BASP header", hs.size() + hdr - 1);
  // A direct message without a receiver.
  refused(hs + frame(message_type::direct_message, bytes(8, 'm'), 0, 1, 0),
          "invalid BASP header", hs.size() + hdr - 1);
  // Above the limit: refused at the header, before CAF allocates it.
  header big{message_type::direct_message, 0, limit + 1, 0, 1, 10};
  refused(hs + serialized(big), "exceeds the limit", hs.size() + hdr - 1);
  // A handshake shorter than a node id.
  refused(frame(message_type::client_handshake, bytes(8, 0)), "too short",
          hdr - 1);
}

CAF_TEST(only requests and answers of plain types pass in direct messages) {
  auto hs = client_handshake(peer);
  auto after = hs.size() + hdr;
  // Requests and answers of oncegate's own types pass.
  auto ok = hs + direct(11, request_id, content("@<>+@atom+oncegate.claim_request"))
            + direct(11, answer_id, content("@<>+oncegate.claim_result"))
            + direct(11, answer_id, content("@<>+@error"));
  CAF_CHECK_EQUAL(whole(2, self, ok), "");
  CAF_CHECK_EQUAL(bytewise(2, self, ok).why, "");
  // An answer sent on to whoever a forwarding stack names.
  auto staged = hs + direct(11, request_id, content("@<>+@atom", 1));
  refused(staged, "forwarding stack", staged.size() - 1);
  // An async message: an exit or a link needs no request.
  auto async = hs + direct(11, 0x1000000000000000, content("@<>+@atom"));
  refused(async, "neither a request nor an answer", async.size() - 1);
  // But the spawn server's answer to CAF's query (async, with a handle).
  CAF_CHECK_EQUAL(
    whole(2, self,
          hs
            + direct(14, 0x1000000000000000,
                     content("@<>+@atom+@str+@strong_actor_ptr+@str"))),
    "");
  // CAF's system messages and actor handles, even as requests: an
  // exit_msg with exit_reason::kill ends any actor.
  for (auto types : {"@<>+@exit", "@<>+@down", "@<>+@atom+@strong_actor_ptr",
                     "@<>+@atom+@actor", "@<>+@message", "@<>+@i32+@addr"}) {
    CAF_MESSAGE(types);
    refused(hs + direct(11, request_id, content(types)), "carrying", after + 60);
  }
  // A named receiver: CAF's spawn-server query only.
  auto spawn = static_cast<uint64_t>(caf::atom("SpawnServ"));
  auto config = static_cast<uint64_t>(caf::atom("ConfigServ"));
  auto named = header::named_receiver_flag;
  CAF_CHECK_EQUAL(whole(2, self,
                        hs
                          + direct(spawn, 0x1000000000000000,
                                   content("@<>+@atom+@atom+@str"), named)),
                  "");
  refused(hs
            + direct(config, 0x1000000000000000,
                     content("@<>+@atom+@str+@message"), named),
          "named receiver", after - 1);
  auto other_query
    = hs + direct(spawn, request_id, content("@<>+@atom+@str+@str"), named);
  refused(other_query, "named receiver", other_query.size() - 1);
  // A type list that does not fit what the guard reads.
  refused(hs + direct(11, request_id, content(std::string(600, 'a'))),
          "too many types", after + 600);
}

CAF_TEST(after a refusal nothing passes) {
  detail::basp_guard guard{2, self, limit};
  auto bad = client_handshake(other);
  auto why = guard.feed(bad.data(), bad.size());
  CAF_CHECK_NOT_EQUAL(why, "");
  auto good = client_handshake(peer);
  CAF_CHECK_EQUAL(guard.feed(good.data(), good.size()), why);
}

CAF_TEST_FIXTURE_SCOPE_END()
