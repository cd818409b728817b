#pragma once

// Where a request's time goes, for diagnosis builds only: configure with
// -DONCEGATE_STAGE_TRACE=ON and every `stage_trace::mark` records (monotonic
// time, thread, event, value) in a ring of 2^21 events that is written to
// the file named by ONCEGATE_STAGE_TRACE when the process exits normally
// (bench/stages.sh reads three nodes' files into a per-hand-off table). In
// every other build `mark` is an empty inline function: no cost, no file,
// no environment read.

#include <cstdint>

namespace oncegate::stage_trace {

#ifdef ONCEGATE_STAGE_TRACE
/// `event` must be a string literal (its address is stored).
void mark(const char* event, uint64_t value = 0);
#else
inline void mark(const char*, uint64_t = 0) {
  // nop
}
#endif

} // namespace oncegate::stage_trace
