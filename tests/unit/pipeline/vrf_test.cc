// VRFs in the route stage: each port's packets are routed in its VRF's table, the same
// prefixes in two VRFs lead to two places, a VRF reaches another only through a route that
// says so (to_vrf), and a reload moves ports between VRFs in one swap.
#include <gtest/gtest.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/vrf.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

class Vrf : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

// Two tenants, each with a client port and a server port, and an uplink in the default VRF.
constexpr uint16_t kBlueIn = 0, kBlueOut = 1, kRedIn = 2, kRedOut = 3, kUplink = 4;

std::vector<PortInfo> tenant_ports() {
  std::vector<PortInfo> ports;
  for (const char* name : {"blue-in", "blue-out", "red-in", "red-out", "uplink"}) {
    const auto i = static_cast<uint8_t>(ports.size());
    ports.push_back(PortInfo{name, MacAddress{{0x02, 0xcc, 0, 0, 0, i}}, ""});
  }
  return ports;
}

std::vector<config::VrfConfig> tenants() {
  config::VrfConfig blue, red;
  blue.name = "blue";
  blue.ports = {"blue-in", "blue-out"};
  red.name = "red";
  red.ports = {"red-in", "red-out"};
  return {blue, red};
}

StaticRoute in_vrf(StaticRoute r, const std::string& vrf) {
  r.vrf = vrf;
  return r;
}

StaticRoute leak(const std::string& pfx, const std::string& from, const std::string& to) {
  StaticRoute r;
  r.prefix = prefix(pfx);
  r.vrf = from;
  NextHop nh;
  nh.vrf = to;
  r.nexthops.push_back(nh);
  return r;
}

RouteConfig routes(std::vector<StaticRoute> rs) {
  RouteConfig p;
  p.routes = std::move(rs);
  p.icmp_time_exceeded = false;
  p.icmp_unreachable = false;
  return p;
}

FrameSpec from(uint16_t port, const std::string& dst) {
  FrameSpec s;
  s.version = dst.find(':') == std::string::npos ? 4 : 6;
  s.src = s.version == 4 ? "10.0.0.2" : "2001:db8:a::2";
  s.dst = dst;
  s.port = port;
  return s;
}

// The overlapping tenants: 10.0.0.0/24 and 2001:db8:a::/64 on each tenant's client port,
// 192.168.1.0/24 on each one's server port; the blue tenant also has 172.16.0.0/24.
std::vector<StaticRoute> tenant_routes() {
  return {in_vrf(route("10.0.0.0/24", "blue-in"), "blue"),
          in_vrf(route("192.168.1.0/24", "blue-out"), "blue"),
          in_vrf(route("2001:db8:b::/64", "blue-out"), "blue"),
          in_vrf(route("172.16.0.0/24", "blue-out"), "blue"),
          in_vrf(route("10.0.0.0/24", "red-in"), "red"),
          in_vrf(route("192.168.1.0/24", "red-out"), "red"),
          in_vrf(route("2001:db8:b::/64", "red-out"), "red")};
}

struct Tenants : Harness {
  Tenants() : Harness(1, tenant_ports()) { ctx.vrfs = tenants(); }
  // Where a packet from `port` to `dst` leaves; kNoPort when it does not.
  uint16_t out(uint16_t port, const std::string& dst) {
    rte_mbuf* m = run_one(make_frame(from(port, dst)));
    return m != nullptr && meta(m).verdict == Verdict::Transmit ? meta(m).out_port : kNoPort;
  }
};

TEST_F(Vrf, TheSameAddressesInTwoVrfsAreTwoPlaces) {
  Tenants h;
  ASSERT_TRUE(h.build({stage("route", routes(tenant_routes()))}));
  EXPECT_EQ(h.out(kBlueIn, "192.168.1.5"), kBlueOut);
  EXPECT_EQ(h.out(kRedIn, "192.168.1.5"), kRedOut);
  EXPECT_EQ(h.out(kBlueOut, "10.0.0.2"), kBlueIn);
  EXPECT_EQ(h.out(kRedOut, "10.0.0.2"), kRedIn);
  EXPECT_EQ(h.out(kBlueIn, "2001:db8:b::5"), kBlueOut);
  EXPECT_EQ(h.out(kRedIn, "2001:db8:b::5"), kRedOut);
  // The uplink is in the default VRF, which has no routes: neither tenant's.
  EXPECT_EQ(h.out(kUplink, "192.168.1.5"), kNoPort);
  EXPECT_EQ(h.outcomes.total_snapshot().drops[size_t(DropReason::NO_ROUTE)], 1u);
}

TEST_F(Vrf, ATenantDoesNotReachAnotherTenantsNetworks) {
  Tenants h;
  ASSERT_TRUE(h.build({stage("route", routes(tenant_routes()))}));
  EXPECT_EQ(h.out(kBlueIn, "172.16.0.9"), kBlueOut);
  EXPECT_EQ(h.out(kRedIn, "172.16.0.9"), kNoPort);
  auto* rs = h.pipeline->find<RouteStage>("route");
  EXPECT_EQ(rs->counters().no_route, 1u);
  // What `vecflowctl routes --vrf red --lookup` shows.
  EXPECT_FALSE(rs->route_for(address("172.16.0.9"), "red"));
  ASSERT_TRUE(rs->route_for(address("172.16.0.9"), "blue"));
  EXPECT_EQ(rs->route_for(address("192.168.1.1"), "red")->route.nexthops[0].port, "red-out");
  EXPECT_FALSE(rs->route_for(address("192.168.1.1")));
}

TEST_F(Vrf, ALeakedRouteLooksTheDestinationUpInTheOtherVrf) {
  Tenants h;
  auto rs_routes = tenant_routes();
  rs_routes.push_back(leak("172.16.0.0/24", "red", "blue"));
  // A leak into a VRF whose own route leaks back is not followed twice.
  rs_routes.push_back(leak("198.18.0.0/15", "red", "blue"));
  rs_routes.push_back(leak("198.18.0.0/15", "blue", "red"));
  // Only the leaked prefix: red still does not reach blue's 192.168.1.0/24.
  ASSERT_TRUE(h.build({stage("route", routes(rs_routes))}));
  EXPECT_EQ(h.out(kRedIn, "172.16.0.9"), kBlueOut);
  EXPECT_EQ(h.out(kRedIn, "192.168.1.9"), kRedOut);
  EXPECT_EQ(h.out(kRedIn, "198.18.0.1"), kNoPort);
  EXPECT_EQ(h.outcomes.total_snapshot().drops[size_t(DropReason::NO_ROUTE)], 1u);
}

// A vector mixing packets of ports in different VRFs (a trunk's VLANs) routes each in its own.
TEST_F(Vrf, AVectorOfSeveralVrfsRoutesEachPacketInItsOwn) {
  Tenants h;
  ASSERT_TRUE(h.build({stage("route", routes(tenant_routes()))}));
  std::vector<rte_mbuf*> pkts;
  for (int i = 0; i < 100; ++i)
    pkts.push_back(make_frame(from(i % 3 == 0 ? kRedIn : kBlueIn, "192.168.1.5")));
  h.run(pkts);
  ASSERT_EQ(h.sinks.tx.size(), 100u);
  for (size_t i = 0; i < h.sinks.tx.size(); ++i) {
    rte_mbuf* m = h.sinks.tx[i];
    EXPECT_EQ(meta(m).out_port, m->port == kRedIn ? kRedOut : kBlueOut) << i;
  }
  AccountingSnapshot a = h.accounting();
  EXPECT_EQ(a.rx, 100u);
  EXPECT_EQ(a.tx, 100u);
}

TEST_F(Vrf, AReloadMovesAPortIntoAnotherVrfWithItsRoutes) {
  Tenants h;
  ASSERT_TRUE(h.build({stage("route", routes(tenant_routes()))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  ASSERT_EQ(h.out(kUplink, "192.168.1.5"), kNoPort);

  // The uplink joins the red VRF; a new VRF green comes with a route of its own.
  auto vrfs = tenants();
  vrfs[1].ports.push_back("uplink");
  config::VrfConfig green;
  green.name = "green";
  vrfs.push_back(green);
  auto next = tenant_routes();
  next.push_back(in_vrf(route("100.64.0.0/10", "uplink"), "green"));
  ASSERT_TRUE(rs->replace_vrfs(vrfs, next));
  EXPECT_EQ(h.out(kUplink, "192.168.1.5"), kRedOut);
  EXPECT_EQ(h.out(kBlueIn, "192.168.1.5"), kBlueOut);
  EXPECT_EQ(rs->vrf_names(), (std::vector<std::string>{"default", "blue", "red", "green"}));

  // A route in a VRF the new list lacks: refused, and the table in force stays.
  auto bad = rs->replace_vrfs(tenants(), next);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("green"), std::string::npos) << bad.error().message;
  EXPECT_EQ(h.out(kUplink, "192.168.1.5"), kRedOut);
  EXPECT_EQ(rs->vrfs().size(), 3u);
}

// A reload keeps every VRF's id (conntrack sessions name their VRF by it): a VRF removed leaves
// its place retired, a new one takes the first retired place, the rest keep theirs, and the
// views never show a retired place.
TEST_F(Vrf, AReloadKeepsEveryVrfsId) {
  const auto named = [](std::vector<std::string> names) {
    std::vector<config::VrfConfig> out;
    for (auto& n : names) {
      config::VrfConfig v;
      v.name = std::move(n);
      out.push_back(v);
    }
    return out;
  };
  const auto names = [](const std::vector<config::VrfConfig>& vrfs) {
    std::vector<std::string> out;
    for (const auto& v : vrfs)
      out.push_back(v.name);
    return out;
  };
  const auto running = named({"blue", "red", "green"});
  // red goes, the file's order changes: blue and green stay where they were.
  auto kept = keep_vrf_ids(running, named({"green", "blue"}));
  EXPECT_EQ(names(kept), (std::vector<std::string>{"blue", "", "green"}));
  // A new VRF takes the retired place; another goes last.
  kept = keep_vrf_ids(kept, named({"green", "white", "blue", "black"}));
  EXPECT_EQ(names(kept), (std::vector<std::string>{"blue", "white", "green", "black"}));
  // Retired places at the end go.
  EXPECT_EQ(names(keep_vrf_ids(kept, named({"blue", "white"}))),
            (std::vector<std::string>{"blue", "white"}));

  Tenants h;
  ASSERT_TRUE(h.build({stage("route", routes(tenant_routes()))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  // blue retired, red keeps id 2 and its routes.
  std::vector<StaticRoute> red_only;
  for (const auto& r : tenant_routes()) {
    if (r.vrf != "blue") red_only.push_back(r);
  }
  ASSERT_TRUE(rs->replace_vrfs(keep_vrf_ids(rs->vrfs(), {tenants()[1]}), red_only));
  EXPECT_EQ(rs->vrf_names(), (std::vector<std::string>{"default", "red"}));
  EXPECT_EQ(h.out(kRedIn, "192.168.1.5"), kRedOut);
  EXPECT_EQ(h.out(kBlueIn, "192.168.1.5"), kNoPort);  // blue's ports are the default VRF's now
  const auto counts = rs->route_counts();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[1].vrf, "red");
}

TEST_F(Vrf, TableBuildRefusesWhatCannotBeRouted) {
  Tenants h;
  ASSERT_TRUE(h.build({stage("route", routes({}))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  const auto refused = [&](std::vector<StaticRoute> rs_routes, const std::string& says) {
    auto r = rs->replace_routes(std::move(rs_routes));
    if (r) return ::testing::AssertionFailure() << "accepted";
    if (r.error().message.find(says) == std::string::npos)
      return ::testing::AssertionFailure() << r.error().message;
    return ::testing::AssertionSuccess();
  };
  EXPECT_TRUE(refused({in_vrf(route("10.0.0.0/24", "blue-in"), "green")}, "no VRF 'green'"));
  EXPECT_TRUE(refused({leak("10.0.0.0/24", "blue", "blue")}, "leaks into its own VRF"));
  EXPECT_TRUE(refused({leak("10.0.0.0/24", "blue", "green")}, "no VRF 'green'"));
  EXPECT_TRUE(refused({in_vrf(route("10.0.0.0/24", "blue-in"), "blue"),
                       in_vrf(route("10.0.0.0/24", "blue-out"), "blue")},
                      "duplicate route 10.0.0.0/24 in VRF blue"));
  // The same prefix in each VRF, and in the default one, is three routes.
  EXPECT_TRUE(rs->replace_routes({route("10.0.0.0/24", "uplink"),
                                  in_vrf(route("10.0.0.0/24", "blue-in"), "blue"),
                                  in_vrf(route("10.0.0.0/24", "red-in"), "red")}));
  EXPECT_EQ(rs->routes().size(), 3u);
}

}  // namespace
