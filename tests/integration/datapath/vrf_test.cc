// VRFs end to end: two tenants with the same addresses on one trunk, each in its own VRF.
// The lab's wan0 is a trunk with four VLANs: tenant blue's client network (VLAN 100) and
// servers (VLAN 200), tenant red's (VLAN 300, VLAN 400), both with 10.0.0.0/24 on the client
// side and 192.168.1.0/24 on the server side, the same host addresses too; a fifth VLAN (500)
// starts in the default VRF. The client side sends tagged frames from a raw socket and sees
// where they come back (tagged_frames.h); the hosts' neighbours are static (no 802.1Q in the
// kernels these tests may run on, and so no kernel VLAN devices to resolve them).
//
// Linux side by side is not possible here: the same job needs VLAN devices and VRF devices
// (CONFIG_VLAN_8021Q, CONFIG_NET_VRF), which this project's test machines' kernels lack.
#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "forwarding_fixture.h"
#include "tagged_frames.h"

namespace vecflow::test {
namespace {

constexpr const char* kBlueClient = "02:00:00:00:b1:02";  // 10.0.0.2, VLAN 100
constexpr const char* kBlueServer = "02:00:00:00:b2:02";  // 192.168.1.2 (and 172.16/17.0.2), 200
constexpr const char* kRedClient = "02:00:00:00:e1:02";   // 10.0.0.2, VLAN 300
constexpr const char* kRedServer = "02:00:00:00:e2:02";   // 192.168.1.2, VLAN 400
constexpr const char* kSpareHost = "02:00:00:00:f5:02";   // 100.64.0.2, VLAN 500

// Tenant blue, tenant red, and the spare VLAN: the ports, VRFs and routes (`vrfs` given apart,
// so that a reload can change them).
std::string tenants_config(const std::string& name, const std::string& socket,
                           const std::string& vrfs, const std::string& more_routes = "",
                           const std::string& more_ports = "",
                           const std::string& more_static = "") {
  return R"(appliance: {name: vrf-test}
cpu: {control: 0, workers: [1]}
dpdk: {memory_mb: 256, hugepages: auto, file_prefix: )" +
         name + R"(, mbufs: 8192}
ports:
  - {name: wan, type: afxdp, interface: wan0, queues: 1, mode: auto}
  - {name: blue-clients, type: vlan, parent: wan, vlan: 100, interface: vb1)" +
         std::to_string(getpid() % 10000) + R"(}
  - {name: blue-servers, type: vlan, parent: wan, vlan: 200, interface: vb2)" +
         std::to_string(getpid() % 10000) + R"(}
  - {name: red-clients, type: vlan, parent: wan, vlan: 300, interface: vr1)" +
         std::to_string(getpid() % 10000) + R"(}
  - {name: red-servers, type: vlan, parent: wan, vlan: 400, interface: vr2)" +
         std::to_string(getpid() % 10000) + R"(}
  - {name: spare, type: vlan, parent: wan, vlan: 500, interface: vs)" +
         std::to_string(getpid() % 10000) + R"(}
)" + more_ports +
         R"(steering:
  default: userspace
  rules:
    - {name: arp, match: {l3: arp}, action: pass}
)" + vrfs +
         R"(
pipeline:
  - stage: route
    routes:
      - {prefix: 10.0.0.0/24, vrf: blue, port: blue-clients}
      - {prefix: 192.168.1.0/24, vrf: blue, port: blue-servers}
      - {prefix: 172.16.0.0/24, vrf: blue, port: blue-servers}
      - {prefix: 172.17.0.0/24, vrf: blue, port: blue-servers}
      - {prefix: 10.0.0.0/24, vrf: red, port: red-clients}
      - {prefix: 192.168.1.0/24, vrf: red, port: red-servers}
      - {prefix: 172.17.0.0/24, vrf: red, to_vrf: blue}
)" + more_routes +
         R"(  - stage: neighbour
    fuse: true
    static:
      - {ip: 10.0.0.2, mac: ")" +
         kBlueClient + R"(", port: blue-clients}
      - {ip: 192.168.1.2, mac: ")" +
         kBlueServer + R"(", port: blue-servers}
      - {ip: 172.16.0.2, mac: ")" +
         kBlueServer + R"(", port: blue-servers}
      - {ip: 172.17.0.2, mac: ")" +
         kBlueServer + R"(", port: blue-servers}
      - {ip: 10.0.0.2, mac: ")" +
         kRedClient + R"(", port: red-clients}
      - {ip: 192.168.1.2, mac: ")" +
         kRedServer + R"(", port: red-servers}
      - {ip: 100.64.0.2, mac: ")" +
         kSpareHost + R"(", port: spare}
)" + more_static +
         R"(control:
  socket: )" +
         socket + "\n";
}

const std::string kTwoTenants = R"(vrfs:
  - {name: blue, ports: [blue-clients, blue-servers]}
  - {name: red, ports: [red-clients, red-servers]}
)";

Bytes tagged(const std::array<uint8_t, 6>& to, std::array<uint8_t, 4> src,
             std::array<uint8_t, 4> dst, uint16_t sport, uint16_t vlan) {
  return udp_frame(to, src, dst, sport, {{0x8100, vlan}});
}

class Vrf : public Forwarding {
 protected:
  std::string edit_config(std::string) override {
    return tenants_config(name_, socket_, kTwoTenants);
  }
  bool resolve_first() const override { return false; }

  std::array<uint8_t, 6> wan_mac() const {
    return mac_bytes(lab_->exec_output('a', "cat /sys/class/net/wan0/address"));
  }

  // Where the test's frames came back: (group, destination MAC, VLAN) -> frames, a frame's
  // group being its UDP source port / 1000 (the test's ports are 1000..9999), each checked
  // to be routed (TTL 63, checksums right).
  using Arrivals = std::map<std::tuple<unsigned, std::string, uint16_t>, unsigned>;
  Arrivals arrivals(TaggedSocket& trunk, int quiet_ms = 1500) {
    Arrivals seen;
    for (const Received& r : trunk.drain(quiet_ms)) {
      const Bytes& f = r.frame;
      if (f.size() < 42 || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17) continue;
      const unsigned sport = unsigned(f[34] << 8 | f[35]);
      if (sport < 1000 || sport >= 10000) continue;
      EXPECT_EQ(f[14 + 8], 63);
      EXPECT_TRUE(ipv4_checksum_ok(f));
      EXPECT_TRUE(l4_checksum_ok(f));
      const std::string to = fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", f[0], f[1],
                                         f[2], f[3], f[4], f[5]);
      ++seen[{sport / 1000, to, r.vlan.value_or(0)}];
    }
    return seen;
  }

  // Blue's clients send `count` datagrams to blue's server, 20 every 10 ms, from a thread
  // of their own (source ports 1000..1999); `sent_all` once they went.
  std::thread blue_flow(const std::array<uint8_t, 6>& wan, uint16_t count,
                        std::atomic<bool>& sent_all) {
    return std::thread([this, wan, count, &sent_all] {
      NetnsScope in(lab_->ns('c'));
      TaggedSocket sender("eth0");
      for (uint16_t i = 0; i < count && in.ok() && sender.ok(); ++i) {
        (void)sender.send(
            tagged(wan, ip4(10, 0, 0, 2), ip4(192, 168, 1, 2), uint16_t(1000 + i % 1000), 100));
        if (i % 20 == 0) std::this_thread::sleep_for(10ms);
      }
      sent_all = true;
    });
  }
  // What of blue_flow() reached blue's server on its VLAN.
  static unsigned blue_arrived(const Arrivals& seen) {
    unsigned n = 0;
    for (const auto& [key, frames] : seen)
      if (std::get<0>(key) == 1 && std::get<1>(key) == kBlueServer && std::get<2>(key) == 200)
        n += frames;
    return n;
  }
  uint64_t route_counter(const std::string& what) {
    return json("routes")["stages"][0][what].get<uint64_t>();
  }

  // rx = tx + kernel + dropped on every port, settled.
  void expect_exact_accounting() {
    const Counters c = quiet_counters();
    for (const auto& p : c.accounting) {
      EXPECT_EQ(p["rx_packets"].get<uint64_t>(), p["tx_packets"].get<uint64_t>() +
                                                     p["kernel_packets"].get<uint64_t>() +
                                                     p["dropped"].get<uint64_t>())
          << p.dump();
    }
    EXPECT_EQ(port(c.accounting, "wan")["in_rings"].get<int64_t>(), 0) << c.accounting.dump();
  }
};

TEST_F(Vrf, TwoTenantsWithTheSameAddressesEachReachOnlyTheirOwn) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  constexpr uint16_t kEach = 30;
  const uint64_t no_route = route_counter("no_route");
  for (uint16_t i = 0; i < kEach; ++i) {
    // The same datagram, 10.0.0.2 -> 192.168.1.2, from each tenant's clients (groups 1, 2),
    // and each one's servers answering (3, 4).
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(10, 0, 0, 2), ip4(192, 168, 1, 2), 1000 + i, 100)));
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(10, 0, 0, 2), ip4(192, 168, 1, 2), 2000 + i, 300)));
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(192, 168, 1, 2), ip4(10, 0, 0, 2), 3000 + i, 200)));
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(192, 168, 1, 2), ip4(10, 0, 0, 2), 4000 + i, 400)));
    // Probes across: red's clients to blue's 172.16.0.0/24 (5), and the spare VLAN, in the
    // default VRF, which has no routes, to either tenant's servers (6).
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(10, 0, 0, 2), ip4(172, 16, 0, 2), 5000 + i, 300)));
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(100, 64, 0, 2), ip4(192, 168, 1, 2), 6000 + i, 500)));
  }
  const Arrivals seen = arrivals(trunk);
  EXPECT_EQ(seen, (Arrivals{{{1, kBlueServer, 200}, kEach},
                            {{2, kRedServer, 400}, kEach},
                            {{3, kBlueClient, 100}, kEach},
                            {{4, kRedClient, 300}, kEach}}));
  // Every probe across was refused for want of a route in its VRF.
  EXPECT_EQ(route_counter("no_route") - no_route, 2u * kEach);
  const Counters c = quiet_counters();
  for (const char* name : {"blue-clients", "blue-servers", "red-clients", "red-servers"})
    EXPECT_EQ(port(c.accounting, name)["tx_packets"].get<uint64_t>(),
              port(c.accounting, name)["rx_packets"].get<uint64_t>() -
                  port(c.accounting, name)["dropped"].get<uint64_t>())
        << c.accounting.dump();
  EXPECT_EQ(port(c.accounting, "red-clients")["dropped"].get<uint64_t>(), kEach);
  EXPECT_EQ(port(c.accounting, "spare")["dropped"].get<uint64_t>(), kEach);
  expect_exact_accounting();

  // What the operator sees: each VRF's table apart, and a lookup in one.
  const Json red = json("routes --vrf red --lookup 172.16.0.2");
  EXPECT_EQ(red["routes"].size(), 3u) << red.dump();
  EXPECT_TRUE(red["lookup"][0]["route"].is_null()) << red.dump();
  const Json blue = json("routes --vrf blue --lookup 172.16.0.2");
  EXPECT_EQ(blue["lookup"][0]["route"]["prefix"], "172.16.0.0/24") << blue.dump();
  EXPECT_NE(ctl("routes --vrf green").rc, 0);
  // Each VRF's next hops: red's two hosts, on red's ports.
  const Json red_hops = json("neighbours --vrf red");
  EXPECT_EQ(red_hops["entries_total"], 2u) << red_hops.dump();
  for (const auto& e : red_hops["entries"])
    EXPECT_TRUE(e["port"] == "red-clients" || e["port"] == "red-servers") << e.dump();
  EXPECT_NE(ctl("neighbours --vrf green").rc, 0);
}

TEST_F(Vrf, ALeakedRouteTakesATenantIntoTheOtherVrfForThatPrefixOnly) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  constexpr uint16_t kEach = 30;
  for (uint16_t i = 0; i < kEach; ++i) {
    // Red's 172.17.0.0/24 leaks into blue (1); its 172.16.0.0/24 does not (2).
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(10, 0, 0, 2), ip4(172, 17, 0, 2), 1000 + i, 300)));
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(10, 0, 0, 2), ip4(172, 16, 0, 2), 2000 + i, 300)));
  }
  EXPECT_EQ(arrivals(trunk), (Arrivals{{{1, kBlueServer, 200}, kEach}}));
  const Counters c = quiet_counters();
  // Charged to red's port it entered by, sent by blue's.
  EXPECT_EQ(port(c.accounting, "red-clients")["tx_packets"].get<uint64_t>(), kEach);
  EXPECT_EQ(port(c.accounting, "red-clients")["dropped"].get<uint64_t>(), kEach);
  expect_exact_accounting();
}

// A reload adds a VRF (green, the spare VLAN's) and its route while blue's traffic flows:
// blue loses nothing, and the spare VLAN routes by its new VRF from then on.
TEST_F(Vrf, AReloadAddsAVrfWithoutDisturbingTheOthers) {
  const std::string next = dir_ + "/next.yaml";
  std::ofstream(next) << tenants_config(
      name_, socket_, kTwoTenants + "  - {name: green, ports: [spare]}\n",
      "      - {prefix: 192.168.1.0/24, vrf: green, to_vrf: red}\n");
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  // Blue's clients send 3000 datagrams over ~1.5 s while the reload is applied.
  constexpr uint16_t kFlow = 3000;
  std::atomic<bool> sent_all{false};
  std::thread flow = blue_flow(wan, kFlow, sent_all);
  std::this_thread::sleep_for(400ms);
  const Json reply = json("reload " + next);
  flow.join();
  ASSERT_TRUE(sent_all);
  // Applied live: the vrfs section (green) and the pipeline's (its route), nothing else.
  EXPECT_EQ(reply["applied"], (Json{"vrfs", "pipeline"})) << reply.dump();
  EXPECT_TRUE(reply["restart_required"].empty()) << reply.dump();
  ASSERT_FALSE(reply["summary"].empty()) << reply.dump();
  EXPECT_EQ(reply["summary"][0]["change"], "vrf green: added, ports [spare]") << reply.dump();
  // After the reload the spare VLAN is green's, which reaches red's servers.
  for (uint16_t i = 0; i < 20; ++i)
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(100, 64, 0, 2), ip4(192, 168, 1, 2), 5000 + i, 500)));
  const Arrivals seen = arrivals(trunk);
  const unsigned blue = blue_arrived(seen);
  EXPECT_EQ(blue, kFlow) << "blue lost datagrams across the reload";
  EXPECT_EQ((seen.at({5, kRedServer, 400})), 20u);
  const Json routes = json("routes --vrf green");
  EXPECT_EQ(routes["routes"].size(), 1u) << routes.dump();
  expect_exact_accounting();
}

constexpr const char* kGreenClient = "02:00:00:00:c1:02";  // 10.0.0.2, VLAN 700 (added live)

// A third tenant arrives by reload: its VLAN and its VRF in one file (the same 10.0.0.0/24 as
// the others, a leak to red's servers), and leaves by the next. Its first frames route in its
// own VRF (the VLAN receives only once the VRF and routes are in place), blue's flow loses
// nothing across either reload, and the VLAN's frames are vlan_unknown once it is gone.
TEST_F(Vrf, AReloadAddsAndRemovesATenantsVlanWithItsVrf) {
  const std::string with_green = dir_ + "/green.yaml";
  std::ofstream(with_green) << tenants_config(
      name_, socket_, kTwoTenants + "  - {name: green, ports: [green-clients]}\n",
      "      - {prefix: 10.0.0.0/24, vrf: green, port: green-clients}\n"
      "      - {prefix: 192.168.1.0/24, vrf: green, to_vrf: red}\n",
      "  - {name: green-clients, type: vlan, parent: wan, vlan: 700, interface: vg" +
          std::to_string(getpid() % 10000) + "}\n",
      fmt::format("      - {{ip: 10.0.0.2, mac: \"{}\", port: green-clients}}\n", kGreenClient));
  const std::string without = dir_ + "/without.yaml";
  std::ofstream(without) << tenants_config(name_, socket_, kTwoTenants);
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  constexpr uint16_t kFlow = 4000;
  std::atomic<bool> sent_all{false};
  std::thread flow = blue_flow(wan, kFlow, sent_all);
  std::this_thread::sleep_for(300ms);
  const Json added = json("reload " + with_green);
  for (uint16_t i = 0; i < 20; ++i)
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(10, 0, 0, 2), ip4(192, 168, 1, 2), 6000 + i, 700)));
  std::this_thread::sleep_for(300ms);
  const Json removed = json("reload " + without);
  for (uint16_t i = 0; i < 10; ++i)
    ASSERT_TRUE(trunk.send(tagged(wan, ip4(10, 0, 0, 2), ip4(192, 168, 1, 2), 7000 + i, 700)));
  flow.join();
  ASSERT_TRUE(sent_all);
  EXPECT_EQ(added["applied"], (Json{"ports", "vrfs", "pipeline"})) << added.dump();
  EXPECT_TRUE(added["restart_required"].empty()) << added.dump();
  EXPECT_EQ(removed["applied"], (Json{"ports", "vrfs", "pipeline"})) << removed.dump();
  const Arrivals seen = arrivals(trunk);
  const unsigned blue = blue_arrived(seen);
  EXPECT_EQ(blue, kFlow) << "blue lost datagrams across the reloads";
  EXPECT_EQ((seen.at({6, kRedServer, 400})), 20u) << "green's frames, leaked to red's servers";
  EXPECT_FALSE(seen.contains({7, kRedServer, 400})) << "forwarded after its VLAN was removed";
  const Exec green = ctl("routes --vrf green");
  EXPECT_NE(green.rc, 0) << "VRF green outlived the reload that removed it: " << green.out;
  expect_exact_accounting();
  // The frames of the removed VLAN: vlan_unknown drops on the trunk (its only port drops).
  const Counters c = quiet_counters();
  EXPECT_EQ(port(c.accounting, "wan")["port_dropped"].get<uint64_t>(), 10u)
      << c.accounting.dump() << c.errors.dump();
  EXPECT_EQ(port(c.accounting, "green-clients")["rx_packets"].get<uint64_t>(), 20u);
}

// ---- NAT from two VRFs to a shared uplink ----

constexpr const char* kGateway = "02:00:00:00:aa:fe";  // 203.0.113.254, the uplink's (VLAN 600)
constexpr uint16_t kRedVlan = 300, kBlueVlan = 100, kUplinkVlan = 600;

// Tenants red and blue (10.0.0.0/24 each, the same client 10.0.0.2) leave through one uplink in
// the default VRF, each source-NATed to 203.0.113.1; the default VRF has no route back to
// 10.0.0.0/24, so a reply reaches a tenant only when its session routes it in the tenant's VRF.
std::string shared_uplink_config(const std::string& name, const std::string& socket) {
  const std::string id = std::to_string(getpid() % 10000);
  return R"(appliance: {name: vrf-nat-test}
cpu: {control: 0, workers: [1]}
dpdk: {memory_mb: 256, hugepages: auto, file_prefix: )" +
         name + R"(, mbufs: 8192}
ports:
  - {name: wan, type: afxdp, interface: wan0, queues: 1, mode: auto}
  - {name: red, type: vlan, parent: wan, vlan: 300, interface: nr)" +
         id + R"(}
  - {name: blue, type: vlan, parent: wan, vlan: 100, interface: nb)" +
         id + R"(}
  - {name: uplink, type: vlan, parent: wan, vlan: 600, interface: nu)" +
         id + R"(}
steering:
  default: userspace
  rules:
    - {name: arp, match: {l3: arp}, action: pass}
vrfs:
  - {name: red, ports: [red]}
  - {name: blue, ports: [blue]}
pipeline:
  - stage: conntrack
    sched: atomic
    nat:
      snat:
        - {in_port: red, src: 10.0.0.0/24, to: 203.0.113.1, ports: 20000-29999}
        - {in_port: blue, src: 10.0.0.0/24, to: 203.0.113.1, ports: 20000-29999}
  - stage: route
    routes:
      - {prefix: 10.0.0.0/24, vrf: red, port: red}
      - {prefix: 0.0.0.0/0, vrf: red, via: 203.0.113.254, port: uplink}
      - {prefix: 10.0.0.0/24, vrf: blue, port: blue}
      - {prefix: 0.0.0.0/0, vrf: blue, via: 203.0.113.254, port: uplink}
      - {prefix: 0.0.0.0/0, via: 203.0.113.254, port: uplink}
  - stage: neighbour
    fuse: true
    static:
      - {ip: 10.0.0.2, mac: ")" +
         kRedClient + R"(", port: red}
      - {ip: 10.0.0.2, mac: ")" +
         kBlueClient + R"(", port: blue}
      - {ip: 203.0.113.254, mac: ")" +
         kGateway + R"(", port: uplink}
control:
  socket: )" +
         socket + "\n";
}

class VrfNat : public Vrf {
 protected:
  std::string edit_config(std::string) override { return shared_uplink_config(name_, socket_); }
};

// A UDP datagram as the trunk saw it.
struct Datagram {
  std::string to_mac;
  uint16_t vlan = 0;
  std::array<uint8_t, 4> src{}, dst{};
  uint16_t sport = 0, dport = 0;
  uint16_t mark = 0;
};

std::vector<Datagram> datagrams(TaggedSocket& trunk, int quiet_ms = 1500) {
  std::vector<Datagram> out;
  for (const Received& r : trunk.drain(quiet_ms)) {
    const Bytes& f = r.frame;
    if (f.size() < kUdpPayload + 2 || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17) continue;
    Datagram d;
    d.to_mac = fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", f[0], f[1], f[2], f[3],
                           f[4], f[5]);
    d.vlan = r.vlan.value_or(0);
    std::copy(f.begin() + 26, f.begin() + 30, d.src.begin());
    std::copy(f.begin() + 30, f.begin() + 34, d.dst.begin());
    d.sport = uint16_t(f[34] << 8 | f[35]);
    d.dport = uint16_t(f[36] << 8 | f[37]);
    d.mark = uint16_t(f[kUdpPayload] << 8 | f[kUdpPayload + 1]);
    if (d.mark == 0) continue;  // not the test's
    EXPECT_EQ(f[14 + 8], 63);
    EXPECT_TRUE(ipv4_checksum_ok(f));
    EXPECT_TRUE(l4_checksum_ok(f));
    out.push_back(d);
  }
  return out;
}

// The issue's case. Each tenant's client 10.0.0.2 sends the same datagrams (the same five-tuple
// in both VRFs) to a server beyond the uplink; they leave from 203.0.113.1 with a port of their
// own per tenant, and the server's answers to each port come back to that tenant's client only,
// on its VLAN, translated back. Per-port accounting exact; `sessions --vrf` shows each.
TEST_F(VrfNat, TwoTenantsWithTheSameAddressesShareOneUplinkThroughSourceNat) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  constexpr uint16_t kEach = 20;
  const auto server = ip4(198, 51, 100, 10), pool = ip4(203, 0, 113, 1), client = ip4(10, 0, 0, 2);
  // A mark per datagram: the tenant's VLAN in the high byte, the flow's number in the low one.
  for (uint16_t i = 0; i < kEach; ++i) {
    for (const uint16_t vlan : {kRedVlan, kBlueVlan})
      ASSERT_TRUE(trunk.send(udp_frame(wan, client, server, uint16_t(1000 + i), {{0x8100, vlan}},
                                       53, uint16_t((vlan / 100) << 8 | (i + 1)))));
  }
  std::map<uint16_t, uint16_t> port_of;  // mark -> the pool port it left from
  for (const Datagram& d : datagrams(trunk)) {
    EXPECT_EQ(d.vlan, kUplinkVlan);
    EXPECT_EQ(d.to_mac, kGateway);
    EXPECT_EQ(d.src, pool);
    EXPECT_EQ(d.dst, server);
    EXPECT_GE(d.sport, 20000);
    EXPECT_LE(d.sport, 29999);
    EXPECT_EQ(d.dport, 53);
    port_of[d.mark] = d.sport;
  }
  ASSERT_EQ(port_of.size(), 2u * kEach);
  std::set<uint16_t> ports;
  for (const auto& [mark, p] : port_of)
    ports.insert(p);
  EXPECT_EQ(ports.size(), 2u * kEach) << "two tenants' connections share a pool port";
  const Json red = json("sessions --vrf red");
  EXPECT_EQ(red["matched"], kEach) << red.dump();
  EXPECT_EQ(red["sessions"][0]["vrf"], "red") << red.dump();
  EXPECT_EQ(json("sessions --vrf blue")["matched"], kEach);
  // (The default VRF's sessions are the lab's own chatter on the untagged trunk, if any.)
  EXPECT_EQ(json("sessions --vrf default --address 198.51.100.10")["matched"], 0u);
  EXPECT_NE(ctl("sessions --vrf green").rc, 0);

  // The server answers each pool port.
  for (const auto& [mark, p] : port_of)
    ASSERT_TRUE(trunk.send(udp_frame(wan, server, pool, 53, {{0x8100, kUplinkVlan}}, p, mark)));
  unsigned home = 0;
  for (const Datagram& d : datagrams(trunk)) {
    const uint16_t vlan = uint16_t((d.mark >> 8) * 100);
    EXPECT_EQ(d.vlan, vlan) << "a reply reached the other tenant";
    EXPECT_EQ(d.to_mac, vlan == kRedVlan ? kRedClient : kBlueClient);
    EXPECT_EQ(d.src, server);
    EXPECT_EQ(d.sport, 53);
    EXPECT_EQ(d.dst, client);
    EXPECT_EQ(d.dport, 1000 + (d.mark & 0xff) - 1);
    home += d.vlan == vlan;
  }
  EXPECT_EQ(home, 2u * kEach);
  for (const Json& s : json("sessions --vrf blue")["sessions"])
    EXPECT_EQ(s["state"], "udp_assured") << s.dump();
  const Counters c = quiet_counters();
  for (const char* name : {"red", "blue"}) {
    EXPECT_EQ(port(c.accounting, name)["rx_packets"].get<uint64_t>(), kEach);
    EXPECT_EQ(port(c.accounting, name)["tx_packets"].get<uint64_t>(), kEach);
  }
  expect_exact_accounting();
}

}  // namespace
}  // namespace vecflow::test
