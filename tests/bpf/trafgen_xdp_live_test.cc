// trafgen's live-frames program (tools/trafgen/xdp_live.bpf.c) through BPF_PROG_TEST_RUN without
// live frames: frame n it writes must be, byte for byte, the frame the AF_PACKET sender sends
// as its n-th (build_flow_frame() of flow n % flows, stamped with sequence n / flows), with
// the stamp the program wrote: flows' ports and addresses, payload header and checksums. Needs
// root (loading BPF); skips otherwise.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "frame.h"
#include "xdp_live.h"

using namespace vecflow;
using namespace vecflow::trafgen;

namespace {

struct Case {
  std::string name;
  int version;
  bool tcp;
  size_t size;
  uint32_t flows;
  uint32_t first_flow;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

FrameSpec spec_of(const Case& c) {
  FrameSpec s;
  s.src_mac = *parse_mac_address("02:00:00:00:00:01");
  s.dst_mac = *parse_mac_address("02:00:00:00:00:02");
  s.src_ip = *parse_ip_address(c.version == 4 ? "192.0.2.2" : "2001:db8::2");
  s.dst_ip = *parse_ip_address(c.version == 4 ? "198.51.100.2" : "2001:db8:1::2");
  s.tcp = c.tcp;
  s.src_port = 65000;  // ports wrap past 65535, as build_flow_frame() wraps them
  s.frame_size = c.size;
  return s;
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

class LiveFrames : public testing::TestWithParam<Case> {};

TEST_P(LiveFrames, AreTheAfPacketSendersFrames) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load the XDP program";
  const Case& c = GetParam();
  FrameSpec spec = spec_of(c);
  // ifindex 1, loopback: BPF_PROG_TEST_RUN's ingress interface must exist.
  auto prog = XdpLiveFrames::load(spec, c.flows, c.first_flow, 1);
  ASSERT_TRUE(prog.has_value()) << prog.error();
  const uint64_t frames = 3 * uint64_t{c.flows} + 1;
  for (uint64_t n = 0; n < frames; ++n) {
    // Each frame in a run of its own, 2 ms after the one before: a stamp left over from an
    // earlier run (the program reads the clock once per batch) is 2 ms old and fails below.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const uint64_t before = monotonic_ns();
    auto got = prog->next_frame();
    ASSERT_TRUE(got.has_value()) << got.error();
    FlowFrame want = build_flow_frame(spec, c.first_flow + uint32_t(n % c.flows));
    ASSERT_EQ(got->size(), want.bytes.size());
    uint64_t tx_ns;
    std::memcpy(&tx_ns, got->data() + want.payload_offset + offsetof(PayloadHeader, tx_ns), 8);
    // Read in the run (each run starts a batch and reads the clock). Against the monotonic
    // clock the stamp is made of: the real-time clock may be stepped meanwhile. 1 ms of slack:
    // BPF reads the NMI-safe copy of that clock, not the vDSO's.
    const uint64_t sent_at = tx_ns - prog->stamp_offset_ns();
    EXPECT_GE(sent_at + 1'000'000, before) << "frame " << n;
    EXPECT_LE(sent_at, monotonic_ns() + 1'000'000) << "frame " << n;
    stamp(want, want.bytes.data(), uint32_t(n / c.flows), tx_ns);
    ASSERT_EQ(*got, want.bytes) << "frame " << n << " (flow " << n % c.flows << ")";
  }
  EXPECT_EQ(prog->frames_run(), frames);
}

// The kernel recycles a live frame's copy without restoring it, and what received the last
// frame may have changed its headers in place (a forwarder: MACs, TTL and the IP checksum, a
// NAT's addresses and ports). The next frame written over such a copy is still the sender's.
TEST_P(LiveFrames, ARecycledCopyAForwarderChangedLeavesWhole) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load the XDP program";
  const Case& c = GetParam();
  FrameSpec spec = spec_of(c);
  auto prog = XdpLiveFrames::load(spec, c.flows, c.first_flow, 1);
  ASSERT_TRUE(prog.has_value()) << prog.error();
  for (uint64_t n = 0; n < 2 * uint64_t{c.flows}; ++n) {
    std::vector<uint8_t> changed = build_flow_frame(spec, c.first_flow).bytes;
    const size_t ip = 14;
    for (size_t i = 0; i < 12; ++i)  // both MACs
      changed[i] ^= 0x5a;
    changed[ip + (c.version == 4 ? 8 : 7)] -= 1;       // TTL / hop limit
    if (c.version == 4) changed[ip + 10] ^= 0x01;      // its checksum, updated
    changed[ip + (c.version == 4 ? 12 : 8)] ^= 0xff;   // a NAT's source address, first byte
    changed[ip + (c.version == 4 ? 16 : 24)] ^= 0xff;  // and destination address
    auto got = prog->next_frame(changed);
    ASSERT_TRUE(got.has_value()) << got.error();
    FlowFrame want = build_flow_frame(spec, c.first_flow + uint32_t(n % c.flows));
    uint64_t tx_ns;
    std::memcpy(&tx_ns, got->data() + want.payload_offset + offsetof(PayloadHeader, tx_ns), 8);
    stamp(want, want.bytes.data(), uint32_t(n / c.flows), tx_ns);
    ASSERT_EQ(*got, want.bytes) << "frame " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Trafgen, LiveFrames,
    testing::Values(Case{"udp4", 4, false, 60, 1, 0}, Case{"udp4_flows", 4, false, 60, 7, 3},
                    Case{"tcp4", 4, true, 128, 5, 0}, Case{"udp6", 6, false, 1500, 5, 0},
                    Case{"tcp6", 6, true, 96, 3, 0},
                    // Flows past 60000 vary the source address (and its checksums).
                    Case{"udp4_spread", 4, false, 60, 6, 59997},
                    Case{"tcp4_spread", 4, true, 80, 6, 59997},
                    Case{"udp6_spread", 6, false, 80, 4, 65534 * 2},
                    // and its second byte past 256 * 60000.
                    Case{"tcp4_spread_high", 4, true, 80, 4, 256 * 60000 - 2}),
    [](const testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
