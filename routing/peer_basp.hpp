#pragma once

// @private: the BASP half of the peer policy (routing/peer_tls.hpp).
//
// TLS proves which member a connection comes from; CAF 0.17's BASP then
// trusts whatever node id the peer claims in its handshake, and the source
// node written in routed, monitor and down messages. A member holding a
// stolen certificate could claim another member's node id (CAF then routes
// that member's traffic to it, and could be told "go ahead" by it) or speak
// in its name. This unit binds the two:
//
//   * under the policy, member N's CAF node id is (its process id,
//     caf_host_id(N)): the interposed node_id::default_data::local (in
//     peer_tls_interpose.cpp) gives this node that id, so every member can
//     tell from a node id which member it claims to be;
//   * basp_guard reads the BASP frames arriving on one connection (the
//     bytes SSL_read hands to CAF, before CAF sees them) and refuses
//     - a handshake whose node id is not of the member the certificate
//       names, or differs from the connection's first handshake;
//     - a routed, monitor or down message from another node than the
//       connection's, or to another node than this one (members talk
//       directly; nobody relays);
//     - in a direct or routed message: a forwarding stack, an async
//       message (oncegate's nodes exchange requests and answers only), a
//       named receiver other than CAF's own spawn-server query, and any
//       of CAF's system messages, actor handles or nested messages
//       (`exit_msg` with `exit_reason::kill` ends any actor it reaches;
//       handles make links, monitors and answers sent elsewhere);
//     - any message before a handshake, an invalid header, a payload above
//       the limit (CAF would allocate it).
//   What the guard cannot see is whose answer a response is: CAF matches it
//   by message id alone, so the routing layer checks every answer's sender
//   (`cluster::answered_by`).
//   The connection is then closed; nothing of the refused frame reaches
//   CAF.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/io/basp/header.hpp>
#include <caf/node_id.hpp>

namespace oncegate::tls {

/// The host part of member `node`'s CAF node id under the policy: the first
/// 20 bytes of SHA-256("oncegate-caf-node-<node>").
caf::node_id::default_data::host_id_type caf_host_id(uint64_t node);

/// Member `node`'s CAF node id in process `pid`.
caf::node_id caf_node_of(uint64_t node, uint32_t pid);

namespace detail {

/// Checks the BASP byte stream one connection delivers to CAF.
class basp_guard {
public:
  /// `peer`: the member the connection's certificate names; `self`: this
  /// node's CAF node id; `max_payload`: the largest payload accepted.
  basp_guard(uint64_t peer, caf::node_id self, uint32_t max_payload);

  /// Feeds the next `n` bytes; returns an empty string if they may pass,
  /// else why not (the guard then refuses everything after).
  std::string feed(const char* data, size_t n);

private:
  std::string check_header();
  std::string check_capture();
  std::string check_message(const char* data, size_t n);

  uint64_t peer_;
  caf::node_id self_;
  uint32_t max_payload_;
  /// The node id of the connection's first handshake (none before).
  caf::node_id remote_;
  /// Header bytes, then the payload bytes the check needs.
  std::vector<char> buf_;
  caf::io::basp::header hdr_;
  /// Payload bytes to collect into buf_ before checking (0: none).
  size_t capture_ = 0;
  /// Payload bytes still to pass unchecked.
  size_t skip_ = 0;
  bool in_payload_ = false;
  std::string failed_;
};

} // namespace detail

} // namespace oncegate::tls
