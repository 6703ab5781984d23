// Fuzzes the XDP steering program (bpf/steer.bpf.c) with the fuzzer's bytes as the frame,
// through BPF_PROG_TEST_RUN, and checks it against the user-space parser on the same bytes:
// the differential check tests/bpf/corpus_xdp_test.cc makes for the committed corpus, on
// whatever frames the fuzzer finds. The program runs with the defaults an appliance gets
// (malformed frames dropped, the rest lifted to an AF_XDP socket), so for every frame:
//
//   user space finds it malformed with reason R  <=>  XDP_DROP, counted as malformed R
//   user space accepts it                        <=>  XDP_REDIRECT with metadata that holds
//                                                    the user-space lengths and flow hash
//
// and the program counts the frame once, with its length. Needs root (loading BPF); without
// it the target exits with VECFLOW_FUZZ_SKIP and ctest reports the test as skipped. The
// process moves into a network namespace of its own, which the kernel removes when it exits,
// also after a crash.
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/parse.h"
#include "fuzz_check.h"
#include "harness.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// Frames up to this size fit the one buffer BPF_PROG_TEST_RUN gives an XDP program; longer
// inputs are cut here (the program is not a multi-buffer one; corpus_xdp_test covers those).
constexpr size_t kSingleBuffer = 3500;

struct State {
  std::unique_ptr<SteerHarness> harness;
  std::unique_ptr<RawXsk> xsk;
};
State* g_state = nullptr;

[[noreturn]] void skip(const char* why) {
  std::fprintf(stderr, "xdp_fuzz: skipped: %s\n", why);
  std::_Exit(VECFLOW_FUZZ_SKIP);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (geteuid() != 0) skip("needs root to load the XDP program");
  if (unshare(CLONE_NEWNET) != 0) skip("cannot make a network namespace");
  if (sh("ip link set lo up") != 0) skip("cannot bring up the namespace's loopback");
  auto* s = new State;
  s->harness = std::make_unique<SteerHarness>();
  if (!s->harness->ok()) {
    std::fprintf(stderr, "xdp_fuzz: %s\n", s->harness->error().c_str());
    std::abort();
  }
  config::SteeringSection steering;
  steering.default_action = {config::SteerActionKind::Userspace, {}};
  steering.malformed = {config::SteerActionKind::Drop, {}};
  steering.no_socket = {config::SteerActionKind::Pass, {}};
  FUZZ_CHECK(s->harness->install(steering).has_value());
  // An AF_XDP socket on this namespace's loopback, so the `userspace` action finds a socket
  // and the program writes its metadata.
  s->xsk = std::make_unique<RawXsk>("lo", 64);
  FUZZ_CHECK(s->xsk->ok());
  uint32_t q0 = 0;
  int xfd = s->xsk->fd();
  FUZZ_CHECK(bpf_map_update_elem(s->harness->program().xsks_map_fd(), &q0, &xfd, BPF_ANY) == 0);
  g_state = s;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SteerHarness& h = *g_state->harness;
  const Bytes frame(data, data + std::min(size, kSingleBuffer));

  ParsedFrame p;
  const auto bad = parse_frame(frame, p);

  auto before = h.program().counters();
  FUZZ_CHECK(before.has_value());
  RunResult r = h.run(frame);
  auto after = h.program().counters();
  FUZZ_CHECK(after.has_value());

  if (r.error != 0) {
    // The kernel refuses frames shorter than an Ethernet header before the program runs.
    FUZZ_CHECK(r.error == -EINVAL && frame.size() < VF_ETH_HLEN);
    FUZZ_CHECK(after->rx_packets == before->rx_packets);
    FUZZ_CHECK(bad == DropReason::L2_TRUNCATED);
    return 0;
  }
  FUZZ_CHECK(after->rx_packets - before->rx_packets == 1);
  FUZZ_CHECK(after->rx_bytes - before->rx_bytes == frame.size());

  if (bad) {
    // Malformed: dropped, under the reason user space names, and counted once.
    FUZZ_CHECK(r.xdp_action == XDP_DROP);
    const size_t k = size_t(*bad);
    FUZZ_CHECK(after->malformed[k] - before->malformed[k] == 1);
    FUZZ_CHECK(after->drop[k] - before->drop[k] == 1);
    uint64_t malformed = 0;
    for (size_t i = 0; i < kDropReasonCount; ++i)
      malformed += after->malformed[i] - before->malformed[i];
    FUZZ_CHECK(malformed == 1);
    return 0;
  }
  // Well-formed: lifted to user space with the metadata user space would compute itself (bare,
  // and counted so, on a kernel that refuses XDP metadata).
  FUZZ_CHECK(r.xdp_action == XDP_REDIRECT);
  for (size_t i = 0; i < kDropReasonCount; ++i)
    FUZZ_CHECK(after->malformed[i] == before->malformed[i]);
  if (!steer::kernel_allows_xdp_metadata()) {
    FUZZ_CHECK(r.meta_size == 0);
    FUZZ_CHECK(after->meta_unavailable - before->meta_unavailable == 1);
    return 0;
  }
  FUZZ_CHECK(r.meta_size >= sizeof(vf_xdp_meta));
  FUZZ_CHECK(r.meta.magic == VF_XDP_META_MAGIC);
  FUZZ_CHECK(r.meta.l2_len == p.l2_len && r.meta.l3_len == p.l3_len);
  FUZZ_CHECK(r.meta.ip_version == p.key.ip_version && r.meta.l4_proto == p.key.l4_proto);
  FUZZ_CHECK(r.meta.vlan_tci == p.vlan_tci);
  FUZZ_CHECK(r.meta.flow_hash == vf_flow_hash(&p.key, 1));
  return 0;
}
