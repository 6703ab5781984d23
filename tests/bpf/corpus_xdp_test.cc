// The malformed-traffic corpus (tests/corpus) through the XDP steering program: every committed
// frame runs through BPF_PROG_TEST_RUN and must come to MANIFEST's xdp outcome, and wherever
// the program parses a frame, its answer must equal the user-space parser's on the same bytes
// (verdict, reason, and for lifted frames the metadata: lengths and flow hash). Then what the
// kernel does with frames the program never sees: jumbo frames (the driver will not attach a
// single-buffer program where they could arrive) and frames above the MTU (the interface drops
// them before XDP).
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/parse.h"
#include "corpus.h"
#include "harness.h"
#include "support/eal_env.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// The corpus runs with the defaults an appliance file gets: malformed frames dropped, the rest
// lifted to user space.
config::SteeringSection corpus_steering() {
  config::SteeringSection s;
  s.default_action = {config::SteerActionKind::Userspace, {}};
  s.malformed = {config::SteerActionKind::Drop, {}};
  s.no_socket = {config::SteerActionKind::Pass, {}};
  return s;
}

std::vector<ManifestEntry> manifest() {
  std::ifstream in(corpus_dir() + "/MANIFEST");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto m = parse_manifest(text);
  if (!m) ADD_FAILURE() << m.error().message;
  return m ? *m : std::vector<ManifestEntry>{};
}

// What the program did with one frame, from its return and the counters that moved.
Outcome xdp_outcome(const RunResult& r, const steer::SteerCounters& before,
                    const steer::SteerCounters& after) {
  if (r.error == -EINVAL && after.rx_packets == before.rx_packets) return Outcome::refused();
  if (r.xdp_action == XDP_DROP) {
    for (size_t i = 0; i < kDropReasonCount; ++i)
      if (after.malformed[i] != before.malformed[i]) return Outcome::drop(DropReason(i));
  }
  // Lifted with its metadata (bare, and counted so, on a kernel without XDP metadata).
  const bool meta = steer::kernel_allows_xdp_metadata();
  if (r.xdp_action == XDP_REDIRECT && r.meta_size == (meta ? sizeof(vf_xdp_meta) : 0u) &&
      after.meta_unavailable - before.meta_unavailable == (meta ? 0u : 1u))
    return Outcome::accept();
  return Outcome{Outcome::Kind(-1), {}};  // anything else: printed as the reason "invalid"
}

}  // namespace

TEST(CorpusXdp, EveryFrameMatchesTheManifestAndTheUserSpacePath) {
  VECFLOW_REQUIRE_NETNS();
  VECFLOW_REQUIRE_EAL();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  ASSERT_TRUE(h.install(corpus_steering()));
  LoopbackXsk xsk(unique_name("vrl"));
  ASSERT_TRUE(xsk.ok()) << "cannot bind an AF_XDP socket for the userspace path";
  uint32_t q0 = 0;
  int xfd = xsk.fd();
  ASSERT_EQ(bpf_map_update_elem(h.program().xsks_map_fd(), &q0, &xfd, BPF_ANY), 0);
  rte_mempool* pool =
      rte_pktmbuf_pool_create("vrl_corpus_xdp", 64, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr);

  size_t frames = 0, compared = 0;
  std::map<std::string, size_t> by_outcome;
  for (const auto& e : manifest()) {
    SCOPED_TRACE(e.file);
    auto pcap = read_pcap(corpus_dir() + "/" + e.file);
    ASSERT_TRUE(pcap) << pcap.error().message;
    ASSERT_EQ(pcap->size(), e.frames);
    for (size_t i = 0; i < pcap->size(); ++i) {
      SCOPED_TRACE("frame " + std::to_string(i));
      const Bytes& f = (*pcap)[i];
      auto before = *h.program().counters();
      auto r = h.run(f);
      auto after = *h.program().counters();
      Outcome xdp = xdp_outcome(r, before, after);
      ++frames;
      ++by_outcome[to_string(xdp)];
      EXPECT_EQ(to_string(xdp), to_string(e.xdp))
          << "xdp action " << r.xdp_action << ", error " << r.error;

      // The user-space path on the same frame, as a DPDK port delivers it.
      rte_mbuf* m = to_mbuf(pool, f);
      ASSERT_NE(m, nullptr);
      auto bad = parse_packet(m, true);
      rte_pktmbuf_free(m);
      Outcome user = bad ? Outcome::drop(*bad) : Outcome::accept();
      if (xdp.kind != Outcome::Refused) {
        ++compared;
        EXPECT_EQ(to_string(xdp), to_string(user)) << "the kernel and user-space parsers disagree";
      }
      if (xdp.kind == Outcome::Refused) continue;

      EXPECT_EQ(after.rx_packets - before.rx_packets, 1u);
      // The program counts a frame's bytes, in several buffers too.
      EXPECT_EQ(after.rx_bytes - before.rx_bytes, f.size());
      if (xdp.kind == Outcome::Drop) {
        size_t k = size_t(xdp.reason);
        EXPECT_EQ(after.drop[k] - before.drop[k], 1u) << "malformed: drop counts the drop";
        EXPECT_EQ(after.verdict[VF_VERDICT_DROP] - before.verdict[VF_VERDICT_DROP], 1u);
      } else if (xdp.kind == Outcome::Accept) {
        // Lifted: the metadata says what user space would have computed itself.
        ParsedFrame p;
        ASSERT_EQ(parse_frame(f, p), std::nullopt);
        EXPECT_EQ(after.verdict[VF_VERDICT_USERSPACE] - before.verdict[VF_VERDICT_USERSPACE], 1u);
        EXPECT_EQ(after.default_hits - before.default_hits, 1u);
        if (!steer::kernel_allows_xdp_metadata()) continue;  // lifted bare: nothing to compare
        EXPECT_EQ(r.meta.magic, VF_XDP_META_MAGIC);
        EXPECT_EQ(r.meta.l2_len, p.l2_len);
        EXPECT_EQ(r.meta.l3_len, p.l3_len);
        EXPECT_EQ(r.meta.ip_version, p.key.ip_version);
        EXPECT_EQ(r.meta.l4_proto, p.key.l4_proto);
        EXPECT_EQ(r.meta.vlan_tci, p.vlan_tci);
        EXPECT_EQ(r.meta.flow_hash, vf_flow_hash(&p.key, 1)) << "same flow id on both sides";
      }
    }
  }
  rte_mempool_free(pool);
  std::string summary;
  for (auto& [o, n] : by_outcome)
    summary += fmt::format(" {}={}", o, n);
  std::printf("xdp replay: %zu frames, %zu compared with user space:%s\n", frames, compared,
              summary.c_str());
  EXPECT_GE(frames, 100u);
}

namespace {

// A namespace with a veth pair va <-> vb, removed on destruction (also when a test fails).
class VethPair {
 public:
  VethPair() : ns_(unique_name("vrl")) {
    // IPv6 off on both ends: the kernel's own frames (MLD reports, router solicitations) would
    // reach XDP too, and the tests count exactly the frames they send.
    ok_ =
        sh("ip netns add " + ns_ + " && ip -n " + ns_ +
           " link add name va type veth peer name vb && ip netns exec " + ns_ +
           " sysctl -qw net.ipv6.conf.va.disable_ipv6=1 net.ipv6.conf.vb.disable_ipv6=1 && ip -n " +
           ns_ + " link set va up && ip -n " + ns_ + " link set vb up") == 0;
  }
  ~VethPair() { sh("ip netns del " + ns_ + " 2>/dev/null"); }
  bool ok() const { return ok_; }
  const std::string& ns() const { return ns_; }
  int ip(const std::string& args) const { return sh("ip -n " + ns_ + " " + args + " 2>/dev/null"); }
  uint64_t stat(const std::string& dev, const std::string& name) const {
    return std::stoull("0" + sh_output("ip netns exec " + ns_ + " cat /sys/class/net/" + dev +
                                       "/statistics/" + name));
  }

 private:
  std::string ns_;
  bool ok_ = false;
};

// Sends `frame` out of `dev` in the namespace through an AF_PACKET socket; returns 0 or -errno.
int send_raw(const std::string& ns, const std::string& dev, const Bytes& frame) {
  NetnsScope in(ns);
  if (!in.ok()) return -EPERM;
  int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  sockaddr_ll sa{};
  sa.sll_family = AF_PACKET;
  sa.sll_ifindex = int(if_nametoindex(dev.c_str()));
  sa.sll_halen = ETH_ALEN;
  int rc = sendto(s, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) ==
                   ssize_t(frame.size())
               ? 0
               : -errno;
  close(s);
  return rc;
}

int attach(const std::string& ns, const std::string& dev, int prog_fd, uint32_t mode) {
  NetnsScope in(ns);
  if (!in.ok()) return -EPERM;
  return bpf_xdp_attach(int(if_nametoindex(dev.c_str())), prog_fd, mode, nullptr);
}

// Waits up to a second for the program to have seen `n` frames (veth delivers on a softirq).
bool wait_rx(steer::SteerProgram& p, uint64_t n) {
  for (int i = 0; i < 100; ++i) {
    if (p.counters()->rx_packets >= n) return true;
    usleep(10'000);
  }
  return false;
}

Bytes corpus_frame(const std::string& file, size_t i) {
  auto pcap = read_pcap(corpus_dir() + "/" + file);
  return pcap && pcap->size() > i ? (*pcap)[i] : Bytes{};
}

}  // namespace

// A 9000-byte frame on a veth at MTU 9000: the kernel attaches the multi-buffer program in
// native mode, hands it the frame as a first buffer and fragments, and the program counts,
// parses and passes all of it; in generic mode the kernel linearises the frame first.
TEST(CorpusXdp, JumboFramesAndTheKernel) {
  VECFLOW_REQUIRE_NETNS();
  VethPair v;
  ASSERT_TRUE(v.ok());
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  auto pass = corpus_steering();
  pass.default_action = {config::SteerActionKind::Pass, {}};
  ASSERT_TRUE(h.install(pass));
  Bytes jumbo = corpus_frame("jumbo_9000.pcap", 0);
  ASSERT_EQ(jumbo.size(), 9000u);

  ASSERT_EQ(v.ip("link set vb mtu 9000"), 0);
  ASSERT_EQ(v.ip("link set va mtu 9000"), 0);
  for (uint32_t mode : {XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE}) {
    SCOPED_TRACE(mode == XDP_FLAGS_DRV_MODE ? "native" : "generic");
    const auto before = *h.program().counters();
    ASSERT_EQ(attach(v.ns(), "va", h.program().prog_fd(), mode), 0);
    ASSERT_EQ(send_raw(v.ns(), "vb", jumbo), 0);
    ASSERT_TRUE(wait_rx(h.program(), before.rx_packets + 1));
    const auto c = *h.program().counters();
    EXPECT_EQ(c.rx_bytes - before.rx_bytes, jumbo.size());
    EXPECT_EQ(c.verdict[VF_VERDICT_PASS] - before.verdict[VF_VERDICT_PASS], 1u);
    for (size_t i = 0; i < kDropReasonCount; ++i)
      EXPECT_EQ(c.malformed[i], 0u) << drop_reason_name(DropReason(i));
    NetnsScope in(v.ns());
    ASSERT_EQ(bpf_xdp_detach(int(if_nametoindex("va")), mode, nullptr), 0);
  }
}

// A frame above the interface's MTU stops at the interface: a veth drops it before XDP, counts
// it on the sending side (tx_dropped) and fails the send; vecflow's counters never see it.
TEST(CorpusXdp, AboveMtuStopsAtTheInterface) {
  VECFLOW_REQUIRE_NETNS();
  VethPair v;
  ASSERT_TRUE(v.ok());
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  auto pass = corpus_steering();
  pass.default_action = {config::SteerActionKind::Pass, {}};
  ASSERT_TRUE(h.install(pass));
  ASSERT_EQ(attach(v.ns(), "va", h.program().prog_fd(), XDP_FLAGS_DRV_MODE), 0);
  Bytes big = corpus_frame("above_mtu.pcap", 0);
  Bytes fits = corpus_frame("well_formed.pcap", 0);
  ASSERT_GT(big.size(), 1500u + 18);

  ASSERT_EQ(v.ip("link set vb mtu 2000"), 0) << "the sender's MTU lets it leave";
  uint64_t dropped = v.stat("vb", "tx_dropped");
  EXPECT_EQ(send_raw(v.ns(), "vb", big), -ENOBUFS) << "veth drops it and tells the sender";
  ASSERT_EQ(send_raw(v.ns(), "vb", fits), 0);
  ASSERT_TRUE(wait_rx(h.program(), 1)) << "the well-formed frame after it arrives";
  usleep(50'000);
  auto c = *h.program().counters();
  EXPECT_EQ(c.rx_packets, 1u) << "only the frame within the MTU reached XDP";
  EXPECT_EQ(c.rx_bytes, fits.size());
  EXPECT_EQ(v.stat("vb", "tx_dropped") - dropped, 1u);
}
