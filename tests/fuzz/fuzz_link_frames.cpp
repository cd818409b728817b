// The node link's wire format (link/frames.hpp) on bytes another node could
// send: the input as a frame header, a hello, a request and an answer, and
// the same for what follows its first 16 bytes (a frame: header, payload).
// Whatever decodes re-encodes to exactly the bytes it came from (every
// value has one encoding), and that decodes again to the same bytes.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "link/frames.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace frames = oncegate::link;

namespace {

void check_header(std::string_view in) {
  if (in.size() < frames::header_size)
    return;
  frames::frame_header h;
  auto err = frames::decode_header(in.data(),
                                 std::numeric_limits<uint32_t>::max(), h);
  FUZZ_CHECK(std::string_view{frames::to_string(err)} != "unknown");
  if (err != frames::header_error::none)
    return;
  char out[frames::header_size];
  frames::encode_header(h, out);
  FUZZ_CHECK(std::string_view(out, frames::header_size)
             == in.substr(0, frames::header_size));
  // A smaller bound refuses exactly the longer payloads.
  if (h.length > 0) {
    frames::frame_header again;
    FUZZ_CHECK(frames::decode_header(in.data(), h.length - 1, again)
               == frames::header_error::too_large);
  }
}

// Decodes `in` with `decode`; if it decodes, its encoding must be `in` and
// decode again to the same. A refusal always says why.
template <class T, class Decode, class Encode>
void check_round_trip(std::string_view in, Decode decode, Encode encode) {
  T x;
  std::string why;
  if (!decode(in, x, why)) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  FUZZ_CHECK(why.empty());
  auto bytes = encode(x);
  FUZZ_CHECK(bytes == in);
  T y;
  FUZZ_CHECK(decode(bytes, y, why));
  FUZZ_CHECK(encode(y) == bytes);
}

void check_payload(std::string_view in) {
  check_round_trip<frames::hello>(in, frames::decode_hello, frames::encode_hello);
  check_round_trip<frames::request>(in, frames::decode_request,
                                  frames::encode_request);
  check_round_trip<frames::answer>(in, frames::decode_answer,
                                 frames::encode_answer);
  frames::hello h;
  std::string why;
  if (frames::decode_hello(in, h, why)) {
    FUZZ_CHECK(h.min_version <= h.max_version);
    FUZZ_CHECK(!h.address.empty() && h.address.size() <= frames::max_address);
    auto v = frames::common_version(h, frames::hello{});
    FUZZ_CHECK(v == 0
               || (v >= h.min_version && v <= h.max_version
                   && v >= frames::min_version && v <= frames::max_version));
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  auto in = oncegate::fuzz::as_text(data, size);
  check_header(in);
  check_payload(in);
  if (in.size() >= frames::header_size)
    check_payload(in.substr(frames::header_size));
  return 0;
}
