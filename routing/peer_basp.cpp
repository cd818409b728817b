#include "routing/peer_basp.hpp"

// The BASP identity guard (see peer_basp.hpp). Frame layout as CAF 0.17.6
// writes it (libcaf_io/src/io/basp/instance.cpp): a 32-byte header, then
// the payload; handshakes start with the sender's node id, routed, monitor
// and down messages with the source and the destination node id. Parsed
// with CAF's own deserializer, so the guard reads exactly what CAF would.

#include <algorithm>
#include <cstring>
#include <string_view>

#include <openssl/evp.h>

#include <caf/atom.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/message_id.hpp>
#include <caf/io/basp/message_type.hpp>

namespace oncegate::tls {

namespace basp = caf::io::basp;

caf::node_id::default_data::host_id_type caf_host_id(uint64_t node) {
  auto text = "oncegate-caf-node-" + std::to_string(node);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  caf::node_id::default_data::host_id_type out{};
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(),
                 nullptr)
        == 1
      && len >= out.size())
    std::memcpy(out.data(), digest, out.size());
  return out;
}

caf::node_id caf_node_of(uint64_t node, uint32_t pid) {
  return caf::make_node_id(pid, caf_host_id(node));
}

namespace detail {

namespace {

// Serialized size of a node id of CAF's default kind: the implementation
// atom, the process id, the host id.
constexpr size_t node_id_size
  = sizeof(uint64_t) + sizeof(uint32_t)
    + caf::node_id::default_data::host_id_size;

bool is_handshake(basp::message_type op) {
  return op == basp::message_type::server_handshake
         || op == basp::message_type::client_handshake;
}

// The first bytes of a direct or routed message's content that the guard
// reads: the forwarding stack's size, and the message's list of type names
// (`message::save`: a u16 zero, then "@<>+type+type..." as a string).
constexpr size_t message_prefix = 520;

// Types no message between oncegate's nodes carries: CAF's system messages
// (an exit_msg with exit_reason::kill ends any actor it reaches), actor
// handles (links, monitors, answers sent elsewhere) and nested messages
// (which could hide either).
constexpr std::string_view refused_types[] = {
  "@exit",          "@down",           "@actor",         "@actorvec",
  "@addr",          "@addrvec",        "@strong_actor_ptr",
  "@weak_actor_ptr", "@group",         "@group_down",    "@message",
  "@open_stream_msg", "@upstream_msg", "@downstream_msg", "@timeout"};

// CAF's own message to a node it learns of, to its spawn server (an async
// request for "info", which CAF answers with nothing): the one message to
// a named receiver oncegate's nodes let through.
constexpr std::string_view spawn_server_query = "@<>+@atom+@atom+@str";
// Its answer, sent on its own (to the querying helper actor): ok, "info",
// the spawn server's handle, its name. The one async message, and the one
// handle, let through.
constexpr std::string_view spawn_server_reply
  = "@<>+@atom+@str+@strong_actor_ptr+@str";

bool names_two_nodes(basp::message_type op) {
  return op == basp::message_type::routed_message
         || op == basp::message_type::monitor_message
         || op == basp::message_type::down_message;
}

std::string text(const caf::node_id& x) {
  return x ? caf::to_string(x) : std::string{"none"};
}

} // namespace

basp_guard::basp_guard(uint64_t peer, caf::node_id self, uint32_t max_payload)
  : peer_(peer), self_(std::move(self)), max_payload_(max_payload) {
  buf_.reserve(2 * node_id_size);
}

std::string basp_guard::feed(const char* data, size_t n) {
  if (!failed_.empty())
    return failed_;
  auto take_into_buf = [&](size_t want) {
    auto take = std::min(want - buf_.size(), n);
    buf_.insert(buf_.end(), data, data + take);
    data += take;
    n -= take;
    return buf_.size() == want;
  };
  while (n > 0) {
    if (!in_payload_) {
      if (!take_into_buf(basp::header_size))
        break;
      if (auto why = check_header(); !why.empty())
        return failed_ = std::move(why);
      continue;
    }
    if (capture_ > 0) {
      if (!take_into_buf(capture_))
        break;
      if (auto why = check_capture(); !why.empty())
        return failed_ = std::move(why);
      capture_ = 0;
      buf_.clear();
      in_payload_ = skip_ > 0;
      continue;
    }
    auto take = std::min(skip_, n);
    skip_ -= take;
    data += take;
    n -= take;
    in_payload_ = skip_ > 0;
  }
  return {};
}

std::string basp_guard::check_header() {
  caf::binary_deserializer bd{nullptr, buf_};
  if (bd(hdr_) || !basp::valid(hdr_))
    return "invalid BASP header";
  buf_.clear();
  auto op = hdr_.operation;
  // Only a refusal needs the words (this runs for every frame).
  auto name = [op] { return "BASP " + basp::to_string(op); };
  if (hdr_.payload_len > max_payload_)
    return name() + " of " + std::to_string(hdr_.payload_len)
           + " bytes exceeds the limit of " + std::to_string(max_payload_);
  capture_ = 0;
  if (is_handshake(op)) {
    capture_ = node_id_size;
  } else if (op != basp::message_type::heartbeat) {
    if (!remote_)
      return name() + " before a handshake";
    if (names_two_nodes(op))
      capture_ = 2 * node_id_size;
  }
  if (hdr_.payload_len < capture_)
    return name() + " too short (" + std::to_string(hdr_.payload_len)
           + " bytes)";
  if (op == basp::message_type::direct_message
      || op == basp::message_type::routed_message) {
    if (hdr_.has(basp::header::named_receiver_flag)
        && hdr_.dest_actor != static_cast<uint64_t>(caf::atom("SpawnServ")))
      return name() + " to a named receiver";
    capture_ += std::min<size_t>(hdr_.payload_len - capture_, message_prefix);
  }
  skip_ = hdr_.payload_len - capture_;
  in_payload_ = hdr_.payload_len > 0;
  return {};
}

std::string basp_guard::check_capture() {
  auto name = [this] { return "BASP " + basp::to_string(hdr_.operation); };
  caf::binary_deserializer bd{nullptr, buf_};
  caf::node_id source;
  if (is_handshake(hdr_.operation)) {
    if (bd(source))
      return name() + " with an unreadable node id";
    auto expected = caf_host_id(peer_);
    auto ok = source
              && source->implementation_id()
                   == caf::node_id::default_data::class_id
              && static_cast<const caf::node_id::default_data&>(*source)
                     .host_id()
                   == expected;
    if (!ok)
      return name() + " claims CAF node " + text(source) + ", which is not node "
             + std::to_string(peer_) + "'s (its certificate's)";
    if (remote_ && source != remote_)
      return name() + " claims CAF node " + text(source)
             + " after a handshake as " + text(remote_);
    remote_ = std::move(source);
    return {};
  }
  if (hdr_.operation == basp::message_type::direct_message)
    return check_message(buf_.data(), buf_.size());
  caf::node_id dest;
  if (bd(source, dest))
    return name() + " with unreadable node ids";
  if (source != remote_)
    return name() + " from CAF node " + text(source)
           + ", not this connection's node " + text(remote_);
  if (dest != self_)
    return name() + " to CAF node " + text(dest) + ", not this node";
  if (hdr_.operation == basp::message_type::routed_message)
    return check_message(buf_.data() + 2 * node_id_size,
                         buf_.size() - 2 * node_id_size);
  return {};
}

std::string basp_guard::check_message(const char* data, size_t n) {
  auto name = [this] { return "BASP " + basp::to_string(hdr_.operation); };
  // The forwarding stack: its size is a varbyte, and oncegate sends none
  // (an answer would go to whoever it names).
  if (n < 1 || static_cast<uint8_t>(data[0]) != 0)
    return name() + " with a forwarding stack";
  // The type names, after a u16 zero, as a varbyte-sized string.
  if (n < 4 || data[1] != 0 || data[2] != 0)
    return name() + " with an unreadable message";
  size_t len = 0;
  size_t pos = 3;
  for (int shift = 0; pos < n && shift < 28; shift += 7) {
    auto b = static_cast<uint8_t>(data[pos++]);
    len |= static_cast<size_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0)
      break;
  }
  if (len > n - pos)
    return name() + " with a message of too many types";
  std::string_view types{data + pos, len};
  if (hdr_.has(basp::header::named_receiver_flag)) {
    if (types != spawn_server_query)
      return name() + " to a named receiver";
    return {};
  }
  // Requests and their answers only: an async message between the nodes is
  // none of oncegate's, but the spawn server's answer to CAF's query.
  if ((hdr_.operation_data & caf::message_id::request_id_mask) == 0) {
    if (types != spawn_server_reply)
      return name() + " that is neither a request nor an answer";
    return {};
  }
  if (types.substr(0, 3) != "@<>")
    return name() + " with an unreadable message";
  types.remove_prefix(3);
  while (!types.empty()) {
    if (types.front() != '+')
      return name() + " with an unreadable message";
    types.remove_prefix(1);
    auto end = types.find('+');
    auto type = types.substr(0, end);
    for (auto refused : refused_types)
      if (type == refused)
        return name() + " carrying " + std::string{type};
    types.remove_prefix(end == std::string_view::npos ? types.size() : end);
  }
  return {};
}

} // namespace detail

} // namespace oncegate::tls
