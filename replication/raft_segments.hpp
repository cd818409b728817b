#pragma once

#include <string>

#include <caf/error.hpp>

namespace oncegate::cluster {

/// How many zero bytes an open segment gets appended before libraft loads
/// it (`pad_open_segments`): more than one batch of ours takes.
constexpr std::size_t open_segment_pad_bytes = 8 * 1024 * 1024;

/// Appends zeros to every non-empty open segment (`open-N`) of the Raft
/// dir `dir` whose last MiB is not all zeros already, before libraft 0.15
/// loads it.
///
/// libraft treats a corrupt or zeroed tail of an open segment as the end of
/// what was written, but a file that ends short of the next batch's 16-byte
/// preamble (or inside a batch) as an I/O error, and when batches before it
/// loaded it then frees their buffer twice (uv_segment.c, the
/// `err_after_read` path): the node aborts at every start. A power cut
/// leaves such a file wherever a file's size can stop at the end of the
/// last O_DSYNC write (POSIX allows it; the power-cut test's file model
/// produces it). With zeros after it, the same tail reads as zeroed, and
/// libraft keeps every whole batch before it: it truncates and closes the
/// segment at the end of the last whole batch (a batch cut only inside its
/// trailing zero padding reads whole again). A file that
/// ends with zeros already is left as it is, so starts that fail again do
/// not grow it.
caf::error pad_open_segments(const std::string& dir);

} // namespace oncegate::cluster
