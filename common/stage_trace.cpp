#include "common/stage_trace.hpp"

#ifdef ONCEGATE_STAGE_TRACE

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>

#include <sys/syscall.h>
#include <unistd.h>

namespace oncegate::stage_trace {

namespace {

struct event {
  uint64_t ns;
  const char* name;
  uint64_t value;
  int tid;
};

constexpr size_t capacity = size_t{1} << 21;

// Allocated only when the variable names a file; written by the static
// destructor (a SIGKILLed process leaves no trace file).
struct ring {
  const char* path = std::getenv("ONCEGATE_STAGE_TRACE");
  std::unique_ptr<event[]> events{path != nullptr ? new event[capacity]
                                                  : nullptr};
  std::atomic<size_t> next{0};

  ~ring() {
    if (events == nullptr)
      return;
    auto f = std::fopen(path, "w");
    if (f == nullptr)
      return;
    auto n = std::min(next.load(), capacity);
    for (size_t i = 0; i < n; ++i)
      std::fprintf(f, "%llu %d %s %llu\n",
                   static_cast<unsigned long long>(events[i].ns), events[i].tid,
                   events[i].name,
                   static_cast<unsigned long long>(events[i].value));
    std::fclose(f);
  }
};

ring& the_ring() {
  static ring r;
  return r;
}

thread_local int my_tid = 0;

} // namespace

void mark(const char* name, uint64_t value) {
  auto& r = the_ring();
  if (r.events == nullptr)
    return;
  auto i = r.next.fetch_add(1, std::memory_order_relaxed);
  if (i >= capacity)
    return;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  if (my_tid == 0)
    my_tid = static_cast<int>(syscall(SYS_gettid));
  r.events[i] = {static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull
                   + static_cast<uint64_t>(ts.tv_nsec),
                 name, value, my_tid};
}

} // namespace oncegate::stage_trace

#endif
