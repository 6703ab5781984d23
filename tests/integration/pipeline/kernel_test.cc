// The pipeline following the kernel of a lab namespace (tools/lab.sh): neighbours the kernel
// resolves by ARP / ND become next-hop addresses without any static entry, routes added and
// removed with `ip route` reach the route stage, interface addresses become ICMP sources.
// Needs root; skipped otherwise.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "core/packet.h"
#include "frames.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/neighbour/neighbour_stage.h"
#include "pipeline/packet_view.h"
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_worker.h"
#include "pipeline/route/route_stage.h"
#include "runtime/qsbr.h"
#include "support/eal_env.h"
#include "support/lab.h"

using namespace vecflow;
using namespace vecflow::test;
using namespace std::chrono_literals;

namespace {

constexpr uint16_t kWan = 0;
constexpr uint16_t kLan = 1;

MacAddress mac_of(const Lab& lab, char side, const std::string& dev) {
  std::string text = lab.exec_output(side, "cat /sys/class/net/" + dev + "/address");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return mac(text);
}

template <typename T>
config::StageConfig stage(std::string type, T params, bool fuse = false) {
  config::StageConfig s;
  s.type = type;
  s.name = type;
  s.fuse = fuse;
  s.params = std::move(params);
  return s;
}

StaticRoute via(const std::string& pfx, const std::string& gw, const std::string& port) {
  StaticRoute r;
  r.prefix = prefix(pfx);
  r.nexthops.push_back(NextHop{gw.empty() ? std::nullopt : std::optional(address(gw)), port});
  return r;
}

// The appliance namespace of a lab, with a pipeline built inside it.
class KernelLab : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_NETNS();
    VECFLOW_REQUIRE_EAL();
    lab_ = std::make_unique<Lab>(unique_name("vpi"));
    ASSERT_TRUE(lab_->ok());
    wan_mac_ = mac_of(*lab_, 'a', "wan0");
    lan_mac_ = mac_of(*lab_, 'a', "lan0");
    server_mac_ = mac_of(*lab_, 's', "eth0");
    client_mac_ = mac_of(*lab_, 'c', "eth0");
    qsbr_ = std::move(*Qsbr::create(1));
  }
  void TearDown() override {
    sinks_.free_all();
    pipeline_.reset();
    lab_.reset();
  }

  ::testing::AssertionResult build(const std::vector<config::StageConfig>& stages) {
    StageContext ctx;
    ctx.ports = {PortInfo{"wan", wan_mac_, "wan0"}, PortInfo{"lan", lan_mac_, "lan0"}};
    ctx.lcore_slots = 1;
    ctx.qsbr = qsbr_.get();
    ctx.vrfs = vrfs_;
    NetnsScope in(lab_->ns('a'));
    if (!in.ok()) return ::testing::AssertionFailure() << "cannot enter " << lab_->ns('a');
    auto p = Pipeline::build(stages, ctx);
    if (!p) return ::testing::AssertionFailure() << p.error().message;
    pipeline_ = std::move(*p);
    worker_ = std::make_unique<PipelineWorker>(*pipeline_, outcomes_, 0);
    return ::testing::AssertionSuccess();
  }

  // Polls the kernel synchroniser (as the control lcore does) until `done` or a timeout.
  template <typename Pred>
  bool poll_until(Pred done, std::chrono::milliseconds timeout = 5s) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      for (auto& s : pipeline_->control_services())
        s->poll();
      if (done()) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  rte_mbuf* run(rte_mbuf* m) {
    sinks_.free_all();
    rte_mbuf* v[1] = {m};
    for (size_t g = 0; g < pipeline_->groups().size(); ++g) {
      sinks_.later.clear();
      worker_->run_vector(g, v, sinks_);
      if (sinks_.later.empty()) break;
    }
    if (!sinks_.tx.empty()) return sinks_.tx[0];
    if (!sinks_.to_kernel.empty()) return sinks_.to_kernel[0];
    return nullptr;
  }

  FrameSpec from_client(const std::string& dst) {
    FrameSpec s;
    s.version = dst.find(':') == std::string::npos ? 4 : 6;
    s.src = s.version == 4 ? "192.0.2.2" : "2001:db8:1::2";
    s.dst = dst;
    s.port = kWan;
    s.src_mac = client_mac_;
    s.dst_mac = wan_mac_;
    return s;
  }

  std::unique_ptr<Lab> lab_;
  MacAddress wan_mac_, lan_mac_, server_mac_, client_mac_;
  std::unique_ptr<Qsbr> qsbr_;
  std::vector<config::VrfConfig> vrfs_;  // the pipeline's VRFs
  OutcomeTable outcomes_{1, 2};
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<PipelineWorker> worker_;
  CollectSinks sinks_;
};

}  // namespace

TEST_F(KernelLab, NextHopsAreLearnedFromTheKernelWithoutStaticEntries) {
  RouteConfig routes;
  routes.routes = {via("198.51.100.0/24", "", "lan"), via("203.0.113.0/24", "198.51.100.2", "lan"),
                   via("2001:db8:99::/64", "2001:db8:2::2", "lan")};
  NeighbourConfig neigh;
  neigh.from_kernel = true;
  neigh.unresolved = Unresolved::Kernel;
  ASSERT_TRUE(build({stage("route", routes), stage("neighbour", neigh, true)}));
  ASSERT_NE(pipeline_->kernel(), nullptr);
  // The kernel does not know the server yet.
  EXPECT_EQ(lab_->exec_output('a', "ip neigh show 198.51.100.2 dev lan0 | grep lladdr"), "");

  // First packets: unresolved, handed to the kernel; vecflow asks the kernel to resolve.
  rte_mbuf* m = run(make_frame(from_client("203.0.113.5")));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).verdict, Verdict::Kernel);
  m = run(make_frame(from_client("2001:db8:99::5")));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).verdict, Verdict::Kernel);

  // The kernel sends ARP and ND, the server answers, the kernel's entries reach vecflow.
  NeighbourTable& table = pipeline_->neighbours();
  auto resolved = [&](const char* ip) {
    uint32_t id = table.find(NeighbourKey::of(PortId{kLan}, address(ip)));
    return id != NeighbourTable::kNotFound &&
           (table.entry(id).word.load() & NeighbourEntry::kResolved);
  };
  ASSERT_TRUE(poll_until([&] { return resolved("198.51.100.2") && resolved("2001:db8:2::2"); }))
      << "kernel neighbours:\n"
      << lab_->exec_output('a', "ip neigh show; ip -6 neigh show");
  EXPECT_NE(lab_->exec_output('a', "ip neigh show 198.51.100.2 dev lan0"), "");
  EXPECT_GE(pipeline_->kernel()->stats().resolve_requests, 2u);

  // Now packets leave with the server's address, through the gateway and to it directly.
  for (const char* dst : {"203.0.113.5", "198.51.100.2", "2001:db8:99::5"}) {
    m = run(make_frame(from_client(dst)));
    ASSERT_NE(m, nullptr) << dst;
    EXPECT_EQ(meta(m).verdict, Verdict::Transmit) << dst;
    EXPECT_EQ(meta(m).out_port, kLan) << dst;
    auto* eth = pkt::eth(m);
    EXPECT_EQ(std::memcmp(eth->dst_addr.addr_bytes, server_mac_.bytes.data(), 6), 0) << dst;
    EXPECT_EQ(std::memcmp(eth->src_addr.addr_bytes, lan_mac_.bytes.data(), 6), 0) << dst;
  }

  // The kernel forgets the server: so does vecflow.
  ASSERT_EQ(lab_->exec('a', "ip neigh del 198.51.100.2 dev lan0"), 0);
  ASSERT_TRUE(poll_until([&] { return !resolved("198.51.100.2"); }));
}

TEST_F(KernelLab, RoutesFollowTheKernel) {
  RouteConfig routes;
  routes.from_kernel = true;
  routes.routes = {via("192.0.2.128/25", "", "wan")};  // the file wins over the kernel
  ASSERT_TRUE(build({stage("route", routes)}));
  auto* rs = pipeline_->find<RouteStage>("route");
  auto route_of = [&](const char* dst) { return rs->route_for(address(dst)); };

  // Connected networks, the box's own addresses, the file's route.
  auto r = route_of("198.51.100.7");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->source, RouteSource::Kernel);
  EXPECT_EQ(r->route.action, RouteAction::Forward);
  ASSERT_EQ(r->route.nexthops.size(), 1u);
  EXPECT_EQ(r->route.nexthops[0].port, "lan");
  EXPECT_FALSE(r->route.nexthops[0].via);
  EXPECT_EQ(kernel_protocol_name(r->route.protocol), "kernel");  // the kernel made it
  r = route_of("192.0.2.1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->route.action, RouteAction::Kernel);
  r = route_of("2001:db8:2::1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->route.action, RouteAction::Kernel);
  r = route_of("192.0.2.200");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->source, RouteSource::Config);
  EXPECT_FALSE(route_of("203.0.113.1"));

  // A routing daemon adds routes: a gateway route, an ECMP route, a blackhole, a route out of
  // an interface vecflow does not own.
  ASSERT_EQ(
      lab_->exec('a',
                 "ip route add 203.0.113.0/24 via 198.51.100.2 dev lan0 proto bgp && "
                 "ip route add 10.9.0.0/16 nexthop via 198.51.100.2 dev lan0 "
                 "nexthop via 192.0.2.2 dev wan0 && "
                 "ip route add blackhole 10.66.0.0/16 && "
                 "ip link add vpidum0 type veth peer name vpidum1 && ip link set vpidum0 up && "
                 "ip route add 10.77.0.0/16 dev vpidum0 && "
                 "ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev lan0"),
      0);
  ASSERT_TRUE(poll_until([&] { return route_of("2001:db8:99::1") && route_of("10.77.1.1"); }));
  r = route_of("203.0.113.9");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->route.nexthops[0].via, address("198.51.100.2"));
  EXPECT_EQ(kernel_protocol_name(r->route.protocol), "bgp");  // who installed it, kept
  r = route_of("10.9.1.1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->route.nexthops.size(), 2u);
  EXPECT_EQ(kernel_protocol_name(r->route.protocol), "boot");  // ip route's default
  EXPECT_EQ(route_of("10.66.1.1")->route.action, RouteAction::Drop);
  EXPECT_EQ(route_of("10.77.1.1")->route.action, RouteAction::Kernel);
  EXPECT_EQ(route_of("2001:db8:99::1")->route.nexthops[0].via, address("2001:db8:2::2"));

  // The data path uses them.
  rte_mbuf* m = run(make_frame(from_client("203.0.113.9")));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kLan);
  m = run(make_frame(from_client("10.77.1.1")));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).verdict, Verdict::Kernel);

  // And routes the daemon removes go.
  ASSERT_EQ(lab_->exec('a', "ip route del 203.0.113.0/24"), 0);
  ASSERT_TRUE(poll_until([&] { return !route_of("203.0.113.9"); }));
  EXPECT_GE(pipeline_->kernel()->stats().route_syncs, 2u);
}

// A VRF that names a kernel table takes that table's routes, as a Linux VRF device's table
// feeds its VRF; other tables stay out, and a reload that changes the table takes the new one.
TEST_F(KernelLab, AVrfFollowsItsKernelTable) {
  config::VrfConfig blue;
  blue.name = "blue";
  blue.table = 10;
  blue.ports = {"lan"};
  vrfs_ = {blue};
  RouteConfig routes;
  routes.from_kernel = true;
  routes.icmp_unreachable = false;  // a packet without a route leaves nothing behind
  ASSERT_TRUE(build({stage("route", routes)}));
  auto* rs = pipeline_->find<RouteStage>("route");
  ASSERT_EQ(lab_->exec('a',
                       "ip route add 10.88.0.0/24 dev lan0 table 10 && "
                       "ip route add 10.89.0.0/24 dev lan0 table 11"),
            0);
  ASSERT_TRUE(poll_until([&] { return rs->route_for(address("10.88.0.1"), "blue").has_value(); }));
  const auto r = rs->route_for(address("10.88.0.1"), "blue");
  EXPECT_EQ(r->source, RouteSource::Kernel);
  EXPECT_EQ(r->route.vrf, "blue");
  EXPECT_EQ(r->route.nexthops[0].port, "lan");
  EXPECT_FALSE(rs->route_for(address("10.88.0.1")));          // not the default VRF's
  EXPECT_FALSE(rs->route_for(address("10.89.0.1"), "blue"));  // table 11: no VRF's
  EXPECT_FALSE(rs->route_for(address("10.89.0.1")));

  // The data path: from lan (VRF blue) it is routed, from wan (the default VRF) it is not.
  FrameSpec in_blue = from_client("10.88.0.9");
  in_blue.port = kLan;
  rte_mbuf* m = run(make_frame(in_blue));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kLan);
  EXPECT_EQ(run(make_frame(from_client("10.88.0.9"))), nullptr);

  // Blue now follows table 11.
  blue.table = 11;
  ASSERT_TRUE(rs->replace_vrfs({blue}, rs->config_routes()));
  ASSERT_TRUE(rs->refresh_kernel_routes());
  EXPECT_TRUE(rs->route_for(address("10.89.0.1"), "blue"));
  EXPECT_FALSE(rs->route_for(address("10.88.0.1"), "blue"));
  // And a reload that removes blue takes its kernel routes away with it.
  ASSERT_TRUE(rs->replace_vrfs({}, rs->config_routes()));
  EXPECT_EQ(rs->vrf_names(), std::vector<std::string>{"default"});
  EXPECT_FALSE(rs->route_for(address("10.89.0.1")));
}

TEST_F(KernelLab, IcmpErrorsComeFromTheIngressInterfacesAddress) {
  RouteConfig routes;
  routes.icmp_time_exceeded = true;
  routes.routes = {via("0.0.0.0/0", "198.51.100.2", "lan")};
  ASSERT_TRUE(build({stage("route", routes)}));
  FrameSpec s = from_client("203.0.113.5");
  s.ttl = 1;
  rte_mbuf* m = run(make_frame(s));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kWan);
  // Copied out: EXPECT_EQ binds references, and the header behind a VLAN tag is 2-byte aligned.
  EXPECT_EQ(uint32_t{pkt::ipv4(m)->src_addr}, rte_cpu_to_be_32(address("192.0.2.1").v4_host()));
  // A new address on the interface is picked up.
  ASSERT_EQ(lab_->exec('a', "ip addr flush dev wan0 && ip addr add 192.0.2.9/24 dev wan0"), 0);
  ASSERT_TRUE(poll_until([&] {
    rte_mbuf* a = run(make_frame(s));
    return a != nullptr &&
           pkt::ipv4(a)->src_addr == rte_cpu_to_be_32(address("192.0.2.9").v4_host());
  }));
}
