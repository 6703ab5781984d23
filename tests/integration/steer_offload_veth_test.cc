// The steering program's offload table on real veth traffic in the lab's namespaces
// (tools/lab.sh): client -> wan0 of the appliance namespace, where the program runs, lan0 ->
// server. The appliance's kernel does not forward (ip_forward=0), and every frame the steering
// rules see would go to the kernel: a UDP flow reaches the server only if its entry, installed
// by hand through OffloadTable, forwards it in XDP. The server captures the frames and checks
// the rewrite (MACs, TTL, IPv4 checksum); the entry's and the port's counters count them
// exactly, and nothing reaches user space.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "steer/steering.h"
#include "support/checksums.h"
#include "support/lab.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr uint16_t kSrcPort = 40001, kDstPort = 5555;
constexpr int kFrames = 50;

std::array<uint8_t, 6> mac_of(const Lab& lab, char side, const std::string& ifname) {
  std::string text = lab.exec_output(side, "cat /sys/class/net/" + ifname + "/address");
  std::array<uint8_t, 6> m{};
  EXPECT_EQ(sscanf(text.c_str(), "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &m[0], &m[1], &m[2], &m[3], &m[4],
                   &m[5]),
            6)
      << text;
  return m;
}

// Frames of the flow the server's eth0 receives, captured with a packet socket.
class Capture {
 public:
  explicit Capture(const std::string& ns) {
    NetnsScope in(ns);
    fd_ = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_IP));
    if (fd_ < 0) return;
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_IP);
    sll.sll_ifindex = int(if_nametoindex("eth0"));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Capture() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // UDP frames to kDstPort received within `wait`.
  std::vector<Bytes> frames(std::chrono::milliseconds wait, size_t want) {
    std::vector<Bytes> out;
    auto until = std::chrono::steady_clock::now() + wait;
    while (out.size() < want && std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      Bytes f(2048);
      ssize_t n = recv(fd_, f.data(), f.size(), 0);
      if (n < 14 + 28) continue;
      f.resize(size_t(n));
      if (f[14 + 9] == 17 && (f[14 + 22] << 8 | f[14 + 23]) == kDstPort) out.push_back(f);
    }
    return out;
  }

 private:
  int fd_ = -1;
};

void send_flow(const std::string& client_ns, int count) {
  NetnsScope in(client_ns);
  ASSERT_TRUE(in.ok());
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_port = htons(kSrcPort);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(kDstPort);
  inet_pton(AF_INET, "198.51.100.2", &to.sin_addr);
  char payload[64] = "vecflow offload test";
  for (int i = 0; i < count; ++i)
    ASSERT_EQ(sendto(fd, payload, sizeof(payload), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              ssize_t(sizeof(payload)));
  close(fd);
}

}  // namespace

TEST(SteerOffloadVeth, AnInstalledEntryForwardsAFlowInXdp) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vov"));
  ASSERT_TRUE(lab.ok());
  const auto lan0_mac = mac_of(lab, 'a', "lan0");
  const auto server_mac = mac_of(lab, 's', "eth0");
  NetnsScope in_a(lab.ns('a'));
  ASSERT_TRUE(in_a.ok());

  steer::SteerSetup setup;
  setup.ports = {{"wan", "wan0", config::XdpAttachMode::Auto}};
  setup.interfaces = {{"wan", "wan0"}, {"lan", "lan0"}};
  setup.steering.default_action = {config::SteerActionKind::Pass, {}};
  auto steering = steer::XdpSteering::start(setup);
  ASSERT_TRUE(steering) << steering.error().message;
  steer::OffloadTable* table = (*steering)->offload("wan");
  ASSERT_NE(table, nullptr);

  vf_flow_key flow{};
  inet_pton(AF_INET, "192.0.2.2", &flow.src[0]);
  inet_pton(AF_INET, "198.51.100.2", &flow.dst[0]);
  flow.src_port = htons(kSrcPort);
  flow.dst_port = htons(kDstPort);
  flow.l4_proto = 17;
  flow.ip_version = 4;
  const auto key = steer::offload_key(flow, if_nametoindex("wan0"));
  steer::OffloadAction action;
  action.dst_mac = server_mac;
  action.src_mac = lan0_mac;
  action.egress_ifindex = if_nametoindex("lan0");
  ASSERT_EQ(*table->install(key, action), steer::InstallStatus::Installed);

  // The client resolves its gateway first (ARP passes to the kernel) so that every UDP frame
  // leaves; the flow's frames then all take the entry.
  ASSERT_EQ(lab.exec('c', "ping -c 1 -W 1 192.0.2.1 >/dev/null"), 0);
  auto before = *(*steering)->counters("wan");
  Capture cap(lab.ns('s'));
  ASSERT_TRUE(cap.ok());
  send_flow(lab.ns('c'), kFrames);
  auto frames = cap.frames(std::chrono::seconds(3), kFrames);
  ASSERT_EQ(frames.size(), size_t(kFrames)) << "the appliance's kernel does not forward";
  for (const auto& f : frames) {
    EXPECT_TRUE(std::equal(server_mac.begin(), server_mac.end(), f.begin()));
    EXPECT_TRUE(std::equal(lan0_mac.begin(), lan0_mac.end(), f.begin() + 6));
    EXPECT_EQ(f[14 + 8], 63) << "TTL 64 decremented once";
    EXPECT_TRUE(ipv4_checksum_ok(f));
    EXPECT_TRUE(l4_checksum_ok(f));
  }

  auto stats = *table->read(key);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->packets, uint64_t(kFrames));
  auto after = *(*steering)->counters("wan");
  EXPECT_EQ(after.verdict[VF_VERDICT_OFFLOAD] - before.verdict[VF_VERDICT_OFFLOAD],
            uint64_t(kFrames));
  EXPECT_EQ(after.offload_bytes - before.offload_bytes, stats->bytes);
  EXPECT_EQ(after.verdict[VF_VERDICT_USERSPACE], 0u) << "nothing reached user space";
  uint64_t sum = 0;
  for (uint64_t v : after.verdict)
    sum += v;
  EXPECT_EQ(after.rx_packets, sum);

  // Removed, the flow goes the normal way again: to the kernel, which does not forward it.
  auto last = *table->remove(key);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->packets, uint64_t(kFrames));
  send_flow(lab.ns('c'), 5);
  EXPECT_TRUE(cap.frames(std::chrono::milliseconds(500), 1).empty());
  auto end = *(*steering)->counters("wan");
  EXPECT_EQ(end.verdict[VF_VERDICT_OFFLOAD], after.verdict[VF_VERDICT_OFFLOAD]);
  EXPECT_GE(end.verdict[VF_VERDICT_PASS] - after.verdict[VF_VERDICT_PASS], 5u);
}
