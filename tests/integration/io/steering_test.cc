// The ports under vecflow's real XDP steering program (userspace/steer), the way the appliance
// runs them: the AF_XDP port takes the steering program's xsks_map; frames lifted by a rule
// arrive with the rule id and flow hash from the program's metadata. And the hybrid: DPDK's
// net_af_xdp attaches the steering object for the DPDK-owned queues, the steering part adopts
// that instance, and the same rules lift frames to both owners.
#include <arpa/inet.h>
#include <net/if.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/config.h"
#include "config/stage_type.h"
#include "core/flow.h"
#include "core/packet.h"
#include "core/parse.h"
#include "io/afxdp/afxdp_port.h"
#include "io/packet_pool.h"
#include "io/port_factory.h"
#include "io_fixtures.h"
#include "steer/steering.h"
#include "support/port_io.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr uint16_t kLiftedPort =
    7777;  // rule 0 lifts UDP to this port; the rest stays in the kernel

// The appliance file of these tests: one afxdp port on the lab's veth, `queues` as given.
config::ApplianceConfig appliance(const std::string& queues) {
  auto cfg = config::load_config_text(
      "ports:\n"
      "  - {name: wan, type: afxdp, interface: vpa0, ring_size: 1024, queues: " +
          queues +
          "}\n"
          "steering:\n"
          "  default: pass\n"
          "  rules:\n"
          "    - {name: lift, match: {proto: udp, dst_port: " +
          std::to_string(kLiftedPort) +
          "},"
          " action: userspace}\n",
      "steering_test.yaml", config::StageTypes{});
  if (!cfg) {
    for (auto& e : cfg.error())
      ADD_FAILURE() << e.to_string();
    std::abort();
  }
  return *cfg;
}

TEST(UnderSteering, AfXdpPortGetsTheLiftedFramesWithTheirRule) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  auto cfg = appliance("1");
  PortEnvironment env = port_environment(cfg);
  env.pool = &pool;
  env.steering_object = steer::XdpSteering::bpf_object_path();
  auto port = create_port(cfg.ports[0], PortId{0}, env);
  ASSERT_TRUE(port) << port.error().message;
  auto steering = steer::XdpSteering::start(steer::steer_setup(cfg));
  ASSERT_TRUE(steering) << steering.error().message;
  auto* wan = static_cast<AfXdpPort*>(port->get());
  ASSERT_TRUE(wan->set_xsks_map((*steering)->xsks_map_fd("wan")));
  ASSERT_TRUE(wan->start());

  RawSocket peer(VethLab::b);
  for (uint16_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(peer.send(udp_frame(static_cast<uint16_t>(100 + i), kLiftedPort)));
    ASSERT_TRUE(peer.send(udp_frame(static_cast<uint16_t>(100 + i), 9)));  // kernel's
  }
  std::vector<uint16_t> q;
  auto got = receive(*wan, 40, 2000, &q);
  EXPECT_EQ(got.size(), 20u) << "only the frames the rule lifts";
  for (rte_mbuf* m : got) {
    ParsedFrame p;
    Bytes b = mbuf_bytes(m);
    ASSERT_FALSE(parse_frame(b, p));
    EXPECT_EQ(p.key.dst_port, htons(kLiftedPort));
    // Rule 0 lifted it: the id came with the frame (no id where the kernel gives no metadata).
    EXPECT_EQ(meta(m).steer_rule, steer::kernel_allows_xdp_metadata() ? 0u : kNoRule);
    EXPECT_EQ(m->hash.rss, flow_hash(p.key, cfg.steering.symmetric_hash));
    EXPECT_EQ(m->packet_type, RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP);
    rte_pktmbuf_free(m);
  }
  wan->stop();
}

TEST(UnderSteering, HybridQueuesTheSteeringPartAdopts) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab(4);
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  const uint32_t idle = pool.in_use();
  auto cfg = appliance("[{queues: 0-1, owner: vecflow}, {queues: 2-3, owner: dpdk}]");
  {
    // The appliance's order: steering first (for this port it only clears stale programs),
    // then the port (DPDK attaches the steering object), then adopt, then the map, then start.
    auto steering = steer::XdpSteering::start(steer::steer_setup(cfg));
    ASSERT_TRUE(steering) << steering.error().message;
    PortEnvironment env = port_environment(cfg);
    env.pool = &pool;
    env.steering_object = steer::XdpSteering::bpf_object_path();
    auto port = create_port(cfg.ports[0], PortId{0}, env);
    ASSERT_TRUE(port) << port.error().message;
    uint32_t prog = attached_xdp_prog(ifindex);
    ASSERT_NE(prog, 0u) << "the steering object DPDK attached with the first DPDK-owned queue";
    ASSERT_TRUE((*steering)->adopt("wan"));
    EXPECT_EQ((*steering)->interfaces().at(0).prog_id, prog);
    auto* wan = static_cast<AfXdpPort*>(port->get());
    ASSERT_TRUE(wan->set_xsks_map((*steering)->xsks_map_fd("wan")));
    ASSERT_TRUE(wan->start());

    RawSocket peer(VethLab::b);
    constexpr int kFlows = 256;
    for (int f = 0; f < kFlows; ++f) {
      ASSERT_TRUE(peer.send(udp_frame(static_cast<uint16_t>(5000 + f), kLiftedPort)));
      ASSERT_TRUE(peer.send(udp_frame(static_cast<uint16_t>(5000 + f), 9)));
    }
    std::vector<uint16_t> queue_of;
    auto got = receive(*wan, 2 * kFlows, 3000, &queue_of);
    EXPECT_EQ(got.size(), static_cast<size_t>(kFlows)) << "the same rule, whichever owner";
    std::map<QueueOwner, int> by_owner;
    PortStatus st = wan->status();
    for (size_t i = 0; i < got.size(); ++i) {
      ++by_owner[st.queues[queue_of[i]].owner];
      EXPECT_EQ(meta(got[i]).steer_rule, steer::kernel_allows_xdp_metadata() ? 0u : kNoRule)
          << "metadata read on queue " << queue_of[i];
      rte_pktmbuf_free(got[i]);
    }
    EXPECT_GT(by_owner[QueueOwner::Vecflow], 0);
    EXPECT_GT(by_owner[QueueOwner::Dpdk], 0);
    wan->stop();
  }
  EXPECT_EQ(attached_xdp_prog(ifindex), 0u) << "nothing left attached";
  EXPECT_EQ(pool.in_use(), idle);
}

}  // namespace
