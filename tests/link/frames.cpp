#define CAF_SUITE link.frames
#include "caf/test/unit_test.hpp"

#include <functional>
#include <limits>
#include <vector>

#include <caf/deep_to_string.hpp>

#include "common/errc.hpp"
#include "link/frames.hpp"
#include "persistence/codec.hpp"

using namespace oncegate;
using namespace oncegate::link;
namespace codec = oncegate::persistence::codec;

namespace {

// Every field set, none to its default (the delivery fields included).
claim_request sample_claim() {
  claim_request c;
  c.route = "orders";
  c.key = std::string("k\0ey", 4);
  c.fingerprint = std::string(32, '\xAB');
  c.now_ms = 1'700'000'000'000;
  c.ttl_ms = 86'400'000;
  c.initial_state = record_state::in_flight;
  c.status = 202;
  c.headers = "Content-Type: application/json";
  c.response = "{\"ok\":true}";
  c.signal = "{\"symbol\":\"X\"}";
  c.owner = 3;
  c.request_id = 0x0123456789ABCDEFu;
  c.deliver_by_ms = 1'700'000'600'000;
  c.signal_type = "application/json; charset=utf-8";
  return c;
}

record_update sample_update() {
  record_update u;
  u.route = "orders";
  u.key = "k1";
  u.op = transition::reconcile_wait;
  u.first_seen_ms = 1'700'000'000'000;
  u.status = 503;
  u.headers = "Retry-After: 1";
  u.response = std::string("with\0nul", 8);
  u.request_id = 0xFEDCBA9876543210u;
  u.attempt = 7;
  u.owner = 2;
  u.now_ms = 1'700'000'001'000;
  u.next_attempt_ms = 1'700'000'002'000;
  u.deliver_by_ms = 1'700'000'900'000;
  return u;
}

record sample_record(const std::string& key = "k1") {
  record r;
  r.route = "orders";
  r.key = key;
  r.state = record_state::failed;
  r.fingerprint = std::string(32, '\x01');
  r.first_seen_ms = 1'700'000'000'000;
  r.expires_at_ms = 1'700'086'400'000;
  r.status = 201;
  r.headers = "X-A: b";
  r.response = "created";
  r.signal = "body";
  r.owner = 5;
  r.request_id = 99;
  r.attempts = 4;
  r.next_attempt_ms = 1'700'000'003'000;
  r.deliver_by_ms = 1'700'000'900'000;
  r.signal_type = "text/plain";
  r.reconciles = 2;
  return r;
}

// One request of every op, every field it carries set.
std::vector<request> sample_requests() {
  std::vector<request> out;
  request x;
  x.kind = op::claim;
  x.claim = sample_claim();
  out.push_back(x);
  x = request{};
  x.kind = op::update;
  x.update = sample_update();
  out.push_back(x);
  x = request{};
  x.kind = op::lookup;
  x.route = "orders";
  x.key = "k1";
  out.push_back(x);
  x = request{};
  x.kind = op::list;
  x.route = "orders";
  x.key = "k0";
  x.state = record_state::queued;
  x.limit = record_bounds::list_page;
  out.push_back(x);
  x = request{};
  x.kind = op::doubt;
  x.node = 4;
  x.before_ms = std::numeric_limits<int64_t>::max();
  out.push_back(x);
  x = request{};
  x.kind = op::add;
  x.node = 6;
  x.address = "10.0.0.6:7100";
  out.push_back(x);
  x = request{};
  x.kind = op::remove;
  x.node = 7;
  out.push_back(x);
  x = request{};
  x.kind = op::transfer;
  x.node = 8;
  out.push_back(x);
  x = request{};
  x.kind = op::pause;
  x.route = "orders";
  x.pause = pause_op::resume;
  x.now_ms = 1'700'000'000'000;
  out.push_back(x);
  // A claim with every guard set (sent as `guarded_claim_op`).
  x = request{};
  x.kind = op::claim;
  x.claim = sample_claim();
  x.claim.guards.stale = true;
  x.claim.guards.max_new_per_minute = 120;
  x.claim.guards.cap_scope = "BTCUSDT";
  out.push_back(x);
  return out;
}

// One successful answer of every op and a failed one.
std::vector<answer> sample_answers() {
  std::vector<answer> out;
  answer x;
  x.kind = op::claim;
  x.claim.outcome = decision::renewed;
  x.claim.rec = sample_record();
  out.push_back(x);
  x = answer{};
  x.kind = op::update;
  x.update.applied = true;
  x.update.current.found = true;
  x.update.current.rec = sample_record();
  out.push_back(x);
  x = answer{};
  x.kind = op::lookup;
  x.lookup.found = true;
  x.lookup.rec = sample_record();
  out.push_back(x);
  x = answer{};
  x.kind = op::list;
  x.page.records = {sample_record("a"), sample_record("b")};
  x.page.next_after = "b";
  out.push_back(x);
  x = answer{};
  x.kind = op::doubt;
  x.value = 12;
  out.push_back(x);
  x = answer{};
  x.kind = op::add;
  x.status = -11;
  out.push_back(x);
  x = answer{};
  x.kind = op::remove;
  x.status = 3;
  out.push_back(x);
  x = answer{};
  x.kind = op::transfer;
  x.value = 2;
  out.push_back(x);
  x = answer{};
  x.kind = op::pause;
  x.pauses = {{"orders", 1'700'000'000'000}, {"tv", 5}};
  out.push_back(x);
  x = answer{};
  x.kind = op::update;
  x.error = errc::leadership_lost;
  x.detail = "leadership lost";
  out.push_back(x);
  return out;
}

// Everything a request carries, as text (CAF's inspect of the structs).
std::string text(const request& x) {
  return caf::deep_to_string(std::make_tuple(
    static_cast<int>(x.kind), x.claim, x.update, x.route, x.key,
    static_cast<int>(x.state), x.limit, x.node, x.before_ms, x.address));
}

std::string text(const answer& x) {
  return caf::deep_to_string(std::make_tuple(
    static_cast<int>(x.kind), static_cast<int>(x.error), x.detail, x.claim,
    x.update, x.lookup, x.page, x.value, x.status));
}

std::string hello_bytes(uint16_t lo, uint16_t hi, std::string address) {
  hello h;
  h.min_version = lo;
  h.max_version = hi;
  h.node_id = 1;
  h.address = std::move(address);
  return encode_hello(h);
}

bool hello_ok(const std::string& bytes) {
  hello h;
  std::string why;
  return decode_hello(bytes, h, why);
}

bool request_ok(const std::string& bytes, std::string* why_out = nullptr) {
  request x;
  std::string why;
  auto ok = decode_request(bytes, x, why);
  if (why_out != nullptr)
    *why_out = why;
  return ok;
}

bool answer_ok(const std::string& bytes, std::string* why_out = nullptr) {
  answer x;
  std::string why;
  auto ok = decode_answer(bytes, x, why);
  if (why_out != nullptr)
    *why_out = why;
  return ok;
}

// Every proper prefix of `bytes` is refused (as truncated), and so is
// `bytes` with one more byte.
void check_exact(const std::string& bytes,
                 const std::function<bool(const std::string&,
                                          std::string*)>& ok) {
  std::string why;
  CAF_REQUIRE(ok(bytes, &why));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    if (ok(bytes.substr(0, n), &why))
      CAF_FAIL("a prefix of " << n << " of " << bytes.size()
                              << " bytes decoded");
    CAF_CHECK_EQUAL(why, "truncated");
  }
  CAF_CHECK(!ok(bytes + '\0', &why));
  CAF_CHECK_EQUAL(why, "trailing bytes");
}

} // namespace

CAF_TEST(a header round trips and reads as documented) {
  frame_header h;
  h.length = 0x01020304;
  h.type = frame_type::answer;
  h.group = 0x0506;
  h.id = 0x0708090A0B0C0D0Eu;
  char buf[header_size];
  encode_header(h, buf);
  CAF_CHECK_EQUAL(std::string(buf, header_size),
                  std::string("\x04\x03\x02\x01\x06\x00\x06\x05"
                              "\x0E\x0D\x0C\x0B\x0A\x09\x08\x07",
                              16));
  frame_header back;
  CAF_REQUIRE_EQUAL(decode_header(buf, 0x01020304, back), header_error::none);
  CAF_CHECK_EQUAL(back.length, h.length);
  CAF_CHECK(back.type == h.type);
  CAF_CHECK_EQUAL(back.group, h.group);
  CAF_CHECK_EQUAL(back.id, h.id);
  for (uint8_t t = 1; t <= max_frame_type; ++t) {
    h.type = static_cast<frame_type>(t);
    encode_header(h, buf);
    CAF_CHECK_EQUAL(decode_header(buf, h.length, back), header_error::none);
    CAF_CHECK_EQUAL(static_cast<int>(back.type), t);
  }
}

CAF_TEST(a header of an unknown type a reserved byte or too long is refused) {
  frame_header h;
  h.length = 100;
  h.type = frame_type::request;
  char buf[header_size];
  encode_header(h, buf);
  frame_header out;
  CAF_CHECK_EQUAL(decode_header(buf, 99, out), header_error::too_large);
  CAF_CHECK_EQUAL(decode_header(buf, 100, out), header_error::none);
  auto bad = [&](int at, char value) {
    char copy[header_size];
    std::copy(buf, buf + header_size, copy);
    copy[at] = value;
    return decode_header(copy, 1000, out);
  };
  CAF_CHECK_EQUAL(bad(4, 0), header_error::unknown_type);
  CAF_CHECK_EQUAL(bad(4, max_frame_type + 1), header_error::unknown_type);
  CAF_CHECK_EQUAL(bad(4, '\xFF'), header_error::unknown_type);
  CAF_CHECK_EQUAL(bad(5, 1), header_error::reserved);
  CAF_CHECK_EQUAL(to_string(header_error::none), std::string("none"));
  CAF_CHECK_EQUAL(to_string(header_error::unknown_type),
                  std::string("unknown_type"));
  CAF_CHECK_EQUAL(to_string(header_error::reserved), std::string("reserved"));
  CAF_CHECK_EQUAL(to_string(header_error::too_large),
                  std::string("too_large"));
}

CAF_TEST(a hello round trips and its bytes start with the magic word) {
  hello h;
  h.min_version = 1;
  h.max_version = 3;
  h.node_id = 0x1122334455667788u;
  h.address = std::string(max_address, 'a');
  auto bytes = encode_hello(h);
  CAF_CHECK_EQUAL(bytes.substr(0, 4), "OGL1");
  hello back;
  std::string why;
  CAF_REQUIRE(decode_hello(bytes, back, why));
  CAF_CHECK_EQUAL(back.min_version, 1);
  CAF_CHECK_EQUAL(back.max_version, 3);
  CAF_CHECK_EQUAL(back.node_id, h.node_id);
  CAF_CHECK_EQUAL(back.address, h.address);
  CAF_CHECK_EQUAL(hello_bytes(1, 1, "n1:7100"),
                  std::string("OGL1\x01\x00\x01\x00"
                              "\x01\x00\x00\x00\x00\x00\x00\x00"
                              "\x07\x00\x00\x00n1:7100",
                              27));
  check_exact(bytes, [](const std::string& b, std::string* why) {
    hello x;
    return decode_hello(b, x, *why);
  });
}

CAF_TEST(a hello with a wrong magic an empty range or a bad address is refused) {
  std::string why;
  hello h;
  auto bytes = hello_bytes(1, 1, "n1:7100");
  bytes[3] = '2';
  CAF_CHECK(!decode_hello(bytes, h, why));
  CAF_CHECK_EQUAL(why, "bad magic");
  CAF_CHECK(!decode_hello(hello_bytes(2, 1, "n1:7100"), h, why));
  CAF_CHECK_EQUAL(why, "empty version range");
  CAF_CHECK(!decode_hello(hello_bytes(1, 1, ""), h, why));
  CAF_CHECK_EQUAL(why, "address size");
  CAF_CHECK(!decode_hello(hello_bytes(1, 1, std::string(max_address + 1, 'a')),
                          h, why));
  CAF_CHECK_EQUAL(why, "address size");
  CAF_CHECK(hello_ok(hello_bytes(2, 2, "a")));
}

CAF_TEST(a hello says its partition count after the address unless it is one) {
  // One group: the bytes of a build before partitions, exactly (above).
  hello h;
  h.node_id = 1;
  h.address = "n1:7100";
  h.min_version = h.max_version = 1;
  CAF_CHECK_EQUAL(encode_hello(h), hello_bytes(1, 1, "n1:7100"));
  hello back;
  std::string why;
  CAF_REQUIRE(decode_hello(encode_hello(h), back, why));
  CAF_CHECK_EQUAL(back.groups, 1);
  for (uint16_t n : {uint16_t{2}, uint16_t{8}, max_groups}) {
    h.groups = n;
    auto bytes = encode_hello(h);
    CAF_CHECK_EQUAL(bytes.size(), hello_bytes(1, 1, "n1:7100").size() + 2);
    CAF_CHECK_EQUAL(bytes.substr(bytes.size() - 2),
                    std::string({static_cast<char>(n & 0xff),
                                 static_cast<char>(n >> 8)}));
    CAF_REQUIRE(decode_hello(bytes, back, why));
    CAF_CHECK_EQUAL(back.groups, n);
  }
  // A count written must be one a cluster can have, and nothing follows.
  auto base = hello_bytes(1, 1, "n1:7100");
  for (auto bad : {std::string("\x00\x00", 2), std::string("\x01\x00", 2),
                   std::string("\x01\x01", 2)}) {
    CAF_CHECK(!decode_hello(base + bad, back, why));
    CAF_CHECK_EQUAL(why, "group count");
  }
  CAF_CHECK(!decode_hello(base + "\x02", back, why));
  CAF_CHECK_EQUAL(why, "trailing bytes");
  CAF_CHECK(!decode_hello(base + std::string("\x02\x00\x00", 3), back, why));
  CAF_CHECK_EQUAL(why, "trailing bytes");
}

CAF_TEST(the common version is the highest both ranges hold) {
  auto range = [](uint16_t lo, uint16_t hi) {
    hello h;
    h.min_version = lo;
    h.max_version = hi;
    return h;
  };
  CAF_CHECK_EQUAL(common_version(hello{}, hello{}), max_version);
  CAF_CHECK_EQUAL(common_version(range(1, 3), range(2, 5)), 3);
  CAF_CHECK_EQUAL(common_version(range(2, 5), range(1, 3)), 3);
  CAF_CHECK_EQUAL(common_version(range(1, 4), range(2, 2)), 2);
  CAF_CHECK_EQUAL(common_version(range(1, 1), range(2, 2)), 0);
  CAF_CHECK_EQUAL(common_version(range(3, 4), range(1, 2)), 0);
  CAF_CHECK_EQUAL(common_version(range(2, 3), range(3, 9)), 3);
}

CAF_TEST(every request round trips with every field) {
  for (auto& x : sample_requests()) {
    CAF_MESSAGE("op " << to_string(x.kind));
    auto bytes = encode_request(x);
    request back;
    std::string why;
    CAF_REQUIRE(decode_request(bytes, back, why));
    CAF_CHECK_EQUAL(text(back), text(x));
    CAF_CHECK_EQUAL(encode_request(back), bytes);
  }
  // The claim's and the update's delivery fields travel.
  request back;
  std::string why;
  CAF_REQUIRE(decode_request(encode_request(sample_requests()[0]), back, why));
  CAF_CHECK_EQUAL(back.claim.deliver_by_ms, 1'700'000'600'000);
  CAF_CHECK_EQUAL(back.claim.signal_type, "application/json; charset=utf-8");
  CAF_REQUIRE(decode_request(encode_request(sample_requests()[1]), back, why));
  CAF_CHECK_EQUAL(back.update.attempt, 7u);
  CAF_CHECK_EQUAL(back.update.next_attempt_ms, 1'700'000'002'000);
  CAF_CHECK_EQUAL(back.update.deliver_by_ms, 1'700'000'900'000);
}

CAF_TEST(a pause answer holds at most max_pauses routes) {
  codec::writer w;
  w.u8(static_cast<uint8_t>(op::pause));
  w.u8(static_cast<uint8_t>(errc::none));
  w.u32(static_cast<uint32_t>(max_pauses + 1));
  std::string why;
  CAF_CHECK(!answer_ok(w.take(), &why));
  CAF_CHECK_EQUAL(why, "pause count");
  // A request to read is the one pause request without a route.
  request read;
  read.kind = op::pause;
  request back;
  CAF_REQUIRE(decode_request(encode_request(read), back, why));
  CAF_CHECK(back.pause == pause_op::read);
  auto bad = encode_request(read);
  bad[5] = 3; // past `resume`
  CAF_CHECK(!decode_request(bad, back, why));
  CAF_CHECK_EQUAL(why, "pause");
}

CAF_TEST(a guarded claim travels as its own op byte and only with a guard) {
  auto guarded = sample_requests().back();
  auto bytes = encode_request(guarded);
  CAF_CHECK_EQUAL(static_cast<uint8_t>(bytes[0]), guarded_claim_op);
  // A build before guards reads op bytes up to `max_op`: it refuses this
  // one instead of deciding the claim without its guards.
  CAF_CHECK_GREATER(guarded_claim_op, max_op);
  request back;
  std::string why;
  CAF_REQUIRE(decode_request(bytes, back, why));
  CAF_CHECK(back.kind == op::claim);
  CAF_CHECK(back.claim.guards.stale);
  CAF_CHECK_EQUAL(back.claim.guards.max_new_per_minute, 120u);
  CAF_CHECK_EQUAL(back.claim.guards.cap_scope, "BTCUSDT");
  // An unguarded claim keeps the bytes of the build before.
  auto plain = sample_requests()[0];
  CAF_CHECK_EQUAL(static_cast<uint8_t>(encode_request(plain)[0]),
                  static_cast<uint8_t>(op::claim));
  // The guarded op with no guard set is not an encoding of anything.
  codec::writer w;
  w.u8(guarded_claim_op);
  auto f = codec::link_format;
  f.guards = codec::guard_fields::present;
  codec::write(w, plain.claim, f);
  CAF_CHECK(!decode_request(w.take(), back, why));
  CAF_CHECK_EQUAL(why, "empty guards");
  // A scope beyond its bound is refused.
  guarded.claim.guards.cap_scope = std::string(record_bounds::cap_scope + 1, 'S');
  CAF_CHECK(!decode_request(encode_request(guarded), back, why));
  CAF_CHECK_EQUAL(why, "cap scope size");
}

CAF_TEST(every answer round trips with every field) {
  for (auto& x : sample_answers()) {
    CAF_MESSAGE("op " << to_string(x.kind) << " error " << to_string(x.error));
    auto bytes = encode_answer(x);
    answer back;
    std::string why;
    CAF_REQUIRE(decode_answer(bytes, back, why));
    CAF_CHECK_EQUAL(text(back), text(x));
    CAF_CHECK_EQUAL(encode_answer(back), bytes);
  }
  answer back;
  std::string why;
  CAF_REQUIRE(decode_answer(encode_answer(sample_answers()[3]), back, why));
  CAF_REQUIRE_EQUAL(back.page.records.size(), 2u);
  CAF_CHECK_EQUAL(back.page.records[1].key, "b");
  CAF_CHECK_EQUAL(back.page.records[1].reconciles, 2u);
  CAF_CHECK_EQUAL(back.page.records[1].signal_type, "text/plain");
}

CAF_TEST(an error answer carries only its code and detail) {
  answer x;
  x.kind = op::claim;
  x.error = errc::not_leader;
  x.detail = "no leader";
  x.claim.rec = sample_record(); // not sent
  auto bytes = encode_answer(x);
  CAF_CHECK_EQUAL(bytes, std::string("\x01\x08\x09\x00\x00\x00no leader", 15));
  answer back;
  std::string why;
  CAF_REQUIRE(decode_answer(bytes, back, why));
  CAF_CHECK(back.error == errc::not_leader);
  CAF_CHECK_EQUAL(back.detail, "no leader");
  CAF_CHECK_EQUAL(back.claim.rec.key, "");
  // A long detail is cut to what a decoder takes.
  x.detail = std::string(max_detail + 10, 'd');
  CAF_REQUIRE(decode_answer(encode_answer(x), back, why));
  CAF_CHECK_EQUAL(back.detail.size(), max_detail);
  codec::writer w;
  w.u8(static_cast<uint8_t>(op::claim));
  w.u8(static_cast<uint8_t>(errc::timeout));
  w.str(std::string(max_detail + 1, 'd'));
  CAF_CHECK(!answer_ok(w.take(), &why));
  CAF_CHECK_EQUAL(why, "detail size");
}

CAF_TEST(every truncation and a trailing byte are refused) {
  for (auto& x : sample_requests()) {
    CAF_MESSAGE("request " << to_string(x.kind));
    check_exact(encode_request(x), request_ok);
  }
  for (auto& x : sample_answers()) {
    CAF_MESSAGE("answer " << to_string(x.kind));
    check_exact(encode_answer(x), answer_ok);
  }
}

CAF_TEST(an unknown op is refused) {
  std::string why;
  for (uint8_t bad : {uint8_t{0}, uint8_t{guarded_claim_op + 1}, uint8_t{0xFF}}) {
    auto req = encode_request(sample_requests()[6]);
    req[0] = static_cast<char>(bad);
    CAF_CHECK(!request_ok(req, &why));
    CAF_CHECK_EQUAL(why, "unknown op");
    auto ans = encode_answer(sample_answers()[6]);
    ans[0] = static_cast<char>(bad);
    CAF_CHECK(!answer_ok(ans, &why));
    CAF_CHECK_EQUAL(why, "unknown op");
  }
  CAF_CHECK_EQUAL(to_string(op::transfer), std::string("transfer"));
  CAF_CHECK_EQUAL(to_string(static_cast<op>(0)), std::string("unknown"));
}

CAF_TEST(enum values beyond the last are refused) {
  // The codec's last values are the enums' last ones: the value after each
  // has no name (a new enumerator must move the codec's bound too).
  CAF_CHECK_EQUAL(to_string(static_cast<errc>(
                    static_cast<uint8_t>(errc::wal_damaged) + 1)),
                  std::string("unknown"));
  CAF_CHECK_EQUAL(to_string(static_cast<record_state>(
                    static_cast<uint8_t>(record_state::failed) + 1)),
                  std::string("unknown"));
  CAF_CHECK_EQUAL(to_string(static_cast<decision>(
                    static_cast<uint8_t>(last_decision) + 1)),
                  std::string("unknown"));
  CAF_CHECK_EQUAL(to_string(static_cast<transition>(
                    static_cast<uint8_t>(transition::reconcile_wait) + 1)),
                  std::string("unknown"));
  std::string why;
  auto reqs = sample_requests();
  // A claim never makes a queued or failed record.
  auto claim = reqs[0];
  claim.claim.initial_state = record_state::queued;
  CAF_CHECK(!request_ok(encode_request(claim), &why));
  CAF_CHECK_EQUAL(why, "record state");
  claim.claim.initial_state = record_state::in_doubt;
  CAF_CHECK(request_ok(encode_request(claim)));
  auto update = reqs[1];
  update.update.op = static_cast<transition>(10);
  CAF_CHECK(!request_ok(encode_request(update), &why));
  CAF_CHECK_EQUAL(why, "transition");
  auto list = reqs[3];
  list.state = static_cast<record_state>(5);
  CAF_CHECK(!request_ok(encode_request(list), &why));
  CAF_CHECK_EQUAL(why, "record state");
  list.state = record_state::failed;
  CAF_CHECK(request_ok(encode_request(list)));
  auto answers = sample_answers();
  auto ans = answers[0];
  ans.claim.outcome = static_cast<decision>(
    static_cast<uint8_t>(last_decision) + 1);
  CAF_CHECK(!answer_ok(encode_answer(ans), &why));
  CAF_CHECK_EQUAL(why, "decision");
  ans = answers[0];
  ans.claim.rec.state = static_cast<record_state>(5);
  CAF_CHECK(!answer_ok(encode_answer(ans), &why));
  CAF_CHECK_EQUAL(why, "record state");
  ans = answers[8];
  ans.error = static_cast<errc>(static_cast<uint8_t>(errc::wal_damaged) + 1);
  CAF_CHECK(!answer_ok(encode_answer(ans), &why));
  CAF_CHECK_EQUAL(why, "errc");
  // Flags are 0 or 1: one encoding per value.
  auto bytes = encode_answer(answers[2]);
  bytes[2] = 2;
  CAF_CHECK(!answer_ok(bytes, &why));
  CAF_CHECK_EQUAL(why, "flag");
}

CAF_TEST(strings beyond the record bounds are refused) {
  namespace b = record_bounds;
  std::string why;
  auto reqs = sample_requests();
  auto refused = [&](request x, const char* reason) {
    CAF_CHECK(!request_ok(encode_request(x), &why));
    CAF_CHECK_EQUAL(why, reason);
  };
  auto x = reqs[0];
  x.claim.route = std::string(b::route + 1, 'r');
  refused(x, "route size");
  x = reqs[0];
  x.claim.fingerprint = std::string(b::fingerprint + 1, 'f');
  refused(x, "fingerprint size");
  x = reqs[0];
  x.claim.headers = std::string(b::headers + 1, 'h');
  refused(x, "headers size");
  x = reqs[0];
  x.claim.signal_type = std::string(b::signal_type + 1, 't');
  refused(x, "content type size");
  x = reqs[1];
  x.update.key = std::string(b::key + 1, 'k');
  refused(x, "key size");
  x = reqs[2];
  x.key = std::string(b::key + 1, 'k');
  refused(x, "key size");
  x.key = std::string(b::key, 'k');
  CAF_CHECK(request_ok(encode_request(x)));
  x = reqs[3];
  x.route = std::string(b::route + 1, 'r');
  refused(x, "route size");
  x = reqs[3];
  x.limit = b::list_page + 1;
  refused(x, "list limit");
  x = reqs[5];
  x.address = std::string(max_address + 1, 'a');
  refused(x, "address size");
  x.address.clear();
  refused(x, "address size");
  auto ans = sample_answers()[3];
  ans.page.next_after = std::string(b::key + 1, 'k');
  CAF_CHECK(!answer_ok(encode_answer(ans), &why));
  CAF_CHECK_EQUAL(why, "key size");
  ans = sample_answers()[2];
  ans.lookup.rec.response = std::string(b::response + 1, 'r');
  CAF_CHECK(!answer_ok(encode_answer(ans), &why));
  CAF_CHECK_EQUAL(why, "response size");
}

CAF_TEST(a page holds at most list_page records and a count must fit) {
  std::string why;
  answer x;
  x.kind = op::list;
  x.page.records.resize(record_bounds::list_page);
  CAF_CHECK(answer_ok(encode_answer(x)));
  x.page.records.emplace_back();
  CAF_CHECK(!answer_ok(encode_answer(x), &why));
  CAF_CHECK_EQUAL(why, "page size");
  // A count the bytes cannot hold is refused before anything is reserved.
  codec::writer w;
  w.u8(static_cast<uint8_t>(op::list));
  w.u8(0);
  w.u32(record_bounds::list_page);
  w.str("");
  CAF_CHECK(!answer_ok(w.take(), &why));
  CAF_CHECK_EQUAL(why, "truncated");
}

CAF_TEST(the shortest record takes min_record_size bytes) {
  codec::writer w;
  codec::write(w, record{});
  CAF_CHECK_EQUAL(w.take().size(), codec::min_record_size);
}
