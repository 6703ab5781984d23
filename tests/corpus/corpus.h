// The malformed-traffic corpus: every case is a pcap file of frames that must all come to the
// same outcome, on each side of the appliance, named in tests/corpus/MANIFEST.
//
//   xdp    the steering program under BPF_PROG_TEST_RUN with `malformed: drop` and the default
//          `userspace`: "accept" = the frame is parsed and lifted to the AF_XDP socket with
//          metadata; a drop reason = XDP_DROP counted under that reason (malformed and drop
//          counters); "refused" = the kernel does not run an XDP program on it at all (see
//          Outcome::Refused).
//   user   the user-space receive path: parse_packet() on the frame as a DPDK port hands it
//          over (2 KiB mbuf segments, chained when larger). "accept" = classified, or the
//          drop reason the port counts.
//
// The cases are built here with FrameBuilder (gen_corpus writes them to disk); the replay tests
// read the committed pcap files and MANIFEST, so what is tested is what is in the repository,
// and corpus_test checks the repository still equals what this file builds.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <rte_mbuf.h>

#include "core/drop_reason.h"
#include "core/error.h"
#include "support/frame_builder.h"

namespace vecflow::test {

struct Outcome {
  enum Kind {
    Accept,  // well-formed: classified and passed on (XDP: lifted with metadata)
    Drop,    // dropped as malformed, counted under `reason`
    // XDP only: the kernel never runs an XDP program on this frame. BPF_PROG_TEST_RUN refuses
    // it with EINVAL, as drivers never hand XDP a frame shorter than an Ethernet header.
    Refused,
  };
  Kind kind = Accept;
  DropReason reason{};

  static Outcome accept() { return {Accept, {}}; }
  static Outcome drop(DropReason r) { return {Drop, r}; }
  static Outcome refused() { return {Refused, {}}; }
  bool operator==(const Outcome&) const = default;
};

// "accept", "refused" or the reason's wire name.
std::string to_string(const Outcome& o);
std::optional<Outcome> outcome_from_string(std::string_view s);

struct CorpusCase {
  std::string name;  // file name without ".pcap"
  Outcome xdp;
  Outcome user;
  std::string what;  // one line: what the frames are and why they come to this outcome
  std::vector<Bytes> frames;
};

// Every case, in MANIFEST order.
std::vector<CorpusCase> corpus_cases();

// The MANIFEST text describing `cases` (one line per case: file, frames, xdp, user, what).
std::string manifest_text(const std::vector<CorpusCase>& cases);

// One MANIFEST line as read back.
struct ManifestEntry {
  std::string file;
  size_t frames = 0;
  Outcome xdp;
  Outcome user;
  std::string what;
};
Result<std::vector<ManifestEntry>> parse_manifest(std::string_view text);

// pcap files (Ethernet link type, microsecond timestamps = frame index, so the bytes are the
// same on every run). Written and read with libpcap.
Result<void> write_pcap(const std::string& path, const std::vector<Bytes>& frames);
Result<std::vector<Bytes>> read_pcap(const std::string& path);

// The directory of the committed corpus (tests/corpus in the source tree).
std::string corpus_dir();

// The frame as a DPDK port hands it over: in mbufs of `pool`, chained when it outgrows one
// (as net_pcap and scattered rx do). nullptr when the pool runs out.
rte_mbuf* to_mbuf(rte_mempool* pool, const Bytes& frame);

}  // namespace vecflow::test
