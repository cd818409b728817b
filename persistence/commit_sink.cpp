#include "persistence/commit_sink.hpp"

namespace oncegate::persistence {

commit_sink::~commit_sink() {
  // nop
}

} // namespace oncegate::persistence
