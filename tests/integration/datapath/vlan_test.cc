// VLAN sub-interfaces end to end: vecflowd routes between 802.1Q VLANs of one trunk (router
// on a stick). The lab's wan0 is the trunk; the client side sends tagged frames from a raw
// socket and reads what comes back with its tag (PACKET_AUXDATA: the kernel takes the tag off
// a received frame before a packet socket sees it). Raw frames rather than Linux VLAN devices
// on the hosts: the kernels these tests run on may lack 802.1Q (CONFIG_VLAN_8021Q), and the
// hosts' neighbours are static in the pipeline for the same reason.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "forwarding_fixture.h"
#include "tagged_frames.h"

namespace vecflow::test {
namespace {

constexpr const char* kOfficeHost = "02:00:00:00:01:02";  // 10.1.0.2, VLAN 100
constexpr const char* kLabHost = "02:00:00:00:02:02";     // 10.2.0.2, VLAN 200

bool kernel_has_vlan_devices() {
  const std::string ns = unique_name("vfq");
  sh("ip netns add " + ns);
  const int rc = sh("ip netns exec " + ns +
                    " sh -c 'ip link add d0 type dummy && ip link add link d0 name d0.5 type vlan "
                    "id 5' 2>/dev/null");
  sh("ip netns del " + ns);
  return rc == 0;
}

class Vlan : public Forwarding {
 protected:
  // The lab's wan0 as a trunk with two VLANs, each an L3 interface of vecflowd's, and routes
  // between them; the hosts' addresses are static neighbours.
  std::string edit_config(std::string) override {
    return R"(appliance: {name: vlan-test}
cpu: {control: 0, workers: [1]}
dpdk: {memory_mb: 256, hugepages: auto, file_prefix: )" +
           name_ + R"(, mbufs: 8192}
ports:
  - {name: wan, type: afxdp, interface: wan0, queues: 1, mode: auto}
  - {name: office, type: vlan, parent: wan, vlan: 100}
  - {name: lab, type: vlan, parent: wan, vlan: 200, interface: vl)" +
           std::to_string(getpid() % 100000) + R"(}
steering:
  default: userspace
  rules:
    - {name: arp, match: {l3: arp}, action: pass}
pipeline:
  - stage: route
    routes:
      - {prefix: 10.1.0.0/24, port: office}
      - {prefix: 10.2.0.0/24, port: lab}
  - stage: neighbour
    fuse: true
    static:
      - {ip: 10.1.0.2, mac: ")" +
           kOfficeHost + R"(", port: office}
      - {ip: 10.2.0.2, mac: ")" +
           kLabHost + R"(", port: lab}
control:
  socket: )" +
           socket_ + "\n";
  }
  bool resolve_first() const override { return false; }

  // The lab's wan0 as a trunk with `ports` (the list's items after wan), `routes` (the route
  // stage's) and `hosts` (static neighbours).
  std::string trunk_config(const std::string& ports, const std::string& routes,
                           const std::string& hosts) const {
    return fmt::format(R"(appliance: {{name: vlan-test}}
cpu: {{control: 0, workers: [1]}}
dpdk: {{memory_mb: 256, hugepages: auto, file_prefix: {}, mbufs: 8192}}
ports:
  - {{name: wan, type: afxdp, interface: wan0, queues: 1, mode: auto}}
{}steering:
  default: userspace
  rules:
    - {{name: arp, match: {{l3: arp}}, action: pass}}
pipeline:
  - stage: route
    routes:
{}  - stage: neighbour
    fuse: true
    static:
{}control:
  socket: {}
)",
                       name_, ports, routes, hosts, socket_);
  }

  std::array<uint8_t, 6> wan_mac() const {
    return mac_bytes(lab_->exec_output('a', "cat /sys/class/net/wan0/address"));
  }

  // rx = tx + kernel + dropped on every port of `rows` (settled accounting).
  static void expect_every_port_exact(const Json& rows) {
    for (const auto& p : rows) {
      EXPECT_EQ(p["rx_packets"].get<uint64_t>(), p["tx_packets"].get<uint64_t>() +
                                                     p["kernel_packets"].get<uint64_t>() +
                                                     p["dropped"].get<uint64_t>())
          << p.dump();
    }
  }

  uint64_t dropped_for(const std::string& reason) {
    const Json errors = json("errors");
    for (const auto& r : errors["reasons"])
      if (r["reason"] == reason) return r["count"].get<uint64_t>();
    return 0;
  }
};

TEST_F(Vlan, RoutesBetweenTheVlansOfOneTrunkWithTheRightTagsAndExactAccounting) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  constexpr uint16_t kEach = 40;
  // VLAN 100 -> VLAN 200, VLAN 200 -> VLAN 100, and untagged from the trunk's own network
  // into VLAN 200.
  for (uint16_t i = 0; i < kEach; ++i) {
    ASSERT_TRUE(
        trunk.send(udp_frame(wan, ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 1000 + i, {{0x8100, 100}})));
    ASSERT_TRUE(
        trunk.send(udp_frame(wan, ip4(10, 2, 0, 2), ip4(10, 1, 0, 2), 2000 + i, {{0x8100, 200}})));
    ASSERT_TRUE(trunk.send(udp_frame(wan, ip4(192, 0, 2, 2), ip4(10, 2, 0, 2), 3000 + i)));
  }
  std::map<std::pair<std::string, uint16_t>, unsigned> seen;  // (to host, vlan) -> frames
  for (const Received& r : trunk.drain(1500)) {
    const Bytes& f = r.frame;
    if (f.size() < 42 || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17) continue;
    const uint16_t sport = uint16_t(f[34] << 8 | f[35]);
    if (sport < 1000 || sport >= 4000) continue;  // not the test's
    // Routed: from the trunk's MAC to the host's, TTL one less, checksums right.
    EXPECT_TRUE(std::equal(wan.begin(), wan.end(), f.begin() + 6));
    EXPECT_EQ(f[14 + 8], 63);
    EXPECT_TRUE(ipv4_checksum_ok(f));
    EXPECT_TRUE(l4_checksum_ok(f));
    const auto to = mac_bytes(kLabHost);
    const bool to_lab = std::equal(to.begin(), to.end(), f.begin());
    const bool from_office = sport < 2000, from_lab = sport >= 2000 && sport < 3000;
    // Each leaves tagged with its egress VLAN, addressed to that VLAN's host.
    EXPECT_EQ(to_lab, !from_lab) << "sport " << sport;
    EXPECT_EQ(r.vlan, std::optional<uint16_t>(from_lab ? 100 : 200)) << "sport " << sport;
    ++seen[{from_office ? "office" : from_lab ? "lab" : "wan", r.vlan.value_or(0)}];
  }
  EXPECT_EQ((seen[{"office", 200}]), kEach);
  EXPECT_EQ((seen[{"lab", 100}]), kEach);
  EXPECT_EQ((seen[{"wan", 200}]), kEach);

  // Each VLAN's frames are its own port's: received there, and transmitted (charged to the
  // ingress port) as many.
  const Counters c = quiet_counters();
  for (const char* name : {"office", "lab"}) {
    const Json p = port(c.accounting, name);
    EXPECT_EQ(p["rx_packets"].get<uint64_t>(), kEach) << p.dump();
    EXPECT_EQ(p["tx_packets"].get<uint64_t>(), kEach) << p.dump();
    EXPECT_EQ(p["dropped"].get<uint64_t>(), 0u) << p.dump();
  }
  // rx = tx + kernel + dropped on every port; what XDP lifted on the trunk is what the trunk
  // and its VLANs received.
  ASSERT_EQ(c.accounting.size(), 3u);
  expect_every_port_exact(c.accounting);
  EXPECT_EQ(port(c.accounting, "wan")["in_rings"].get<int64_t>(), 0) << c.accounting.dump();
  EXPECT_GE(port(c.accounting, "wan")["tx_packets"].get<uint64_t>(), kEach);
}

TEST_F(Vlan, FramesOfAVlanNoSubInterfaceClaimsAreCountedNotForwarded) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  const uint64_t before = dropped_for("vlan_unknown");
  // VLAN 300 (no port), 802.1ad 100 (only 802.1Q tags are sub-interfaces), and VLAN 100
  // inside VLAN 100 (two tags).
  for (uint16_t i = 0; i < 7; ++i)
    ASSERT_TRUE(
        trunk.send(udp_frame(wan, ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 1000 + i, {{0x8100, 300}})));
  for (uint16_t i = 0; i < 3; ++i)
    ASSERT_TRUE(
        trunk.send(udp_frame(wan, ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 1100 + i, {{0x88a8, 100}})));
  for (uint16_t i = 0; i < 2; ++i)
    ASSERT_TRUE(trunk.send(udp_frame(wan, ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 1200 + i,
                                     {{0x8100, 100}, {0x8100, 100}})));
  for (const Received& r : trunk.drain(1000)) {
    const Bytes& f = r.frame;
    const bool udp = f.size() >= 42 && f[12] == 0x08 && f[13] == 0x00 && f[14 + 9] == 17;
    EXPECT_FALSE(udp && (f[34] << 8 | f[35]) >= 1000 && (f[34] << 8 | f[35]) < 1300)
        << "forwarded a frame of no sub-interface";
  }
  const Counters c = quiet_counters();
  EXPECT_EQ(dropped_for("vlan_unknown") - before, 12u) << c.errors.dump();
  EXPECT_EQ(port(c.accounting, "wan")["port_dropped"].get<uint64_t>(), 12u) << c.accounting.dump();
  for (const char* name : {"office", "lab"})
    EXPECT_EQ(port(c.accounting, name)["rx_packets"].get<uint64_t>(), 0u) << c.accounting.dump();
  EXPECT_EQ(port(c.accounting, "wan")["in_rings"].get<int64_t>(), 0) << c.accounting.dump();
}

// A trunk with 99 VLANs, each a port (ids 1..99: the last 35 past the 64 the per-port
// tables once held), routing between the first and the last.
class VlanTrunkOf99 : public Vlan {
 protected:
  static constexpr int kVlans = 99;
  std::string edit_config(std::string) override {
    std::string ports;
    for (int i = 1; i <= kVlans; ++i)
      ports += fmt::format("  - {{name: v{}, type: vlan, parent: wan, vlan: {}}}\n", i, 1000 + i);
    return trunk_config(ports,
                        fmt::format("      - {{prefix: 10.1.0.0/24, port: v1}}\n"
                                    "      - {{prefix: 10.2.0.0/24, port: v{}}}\n",
                                    kVlans),
                        fmt::format("      - {{ip: 10.1.0.2, mac: \"{}\", port: v1}}\n"
                                    "      - {{ip: 10.2.0.2, mac: \"{}\", port: v{}}}\n",
                                    kOfficeHost, kLabHost, kVlans));
  }
};

TEST_F(VlanTrunkOf99, RoutesBetweenItsFirstAndLastVlanWithExactAccounting) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  constexpr uint16_t kEach = 30;
  const uint16_t first = 1001, last = 1000 + kVlans;
  for (uint16_t i = 0; i < kEach; ++i) {
    ASSERT_TRUE(trunk.send(
        udp_frame(wan, ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 1000 + i, {{0x8100, first}})));
    ASSERT_TRUE(
        trunk.send(udp_frame(wan, ip4(10, 2, 0, 2), ip4(10, 1, 0, 2), 2000 + i, {{0x8100, last}})));
  }
  std::map<std::optional<uint16_t>, unsigned> by_vlan;  // of the test's frames that came back
  for (const Received& r : trunk.drain(1500)) {
    const Bytes& f = r.frame;
    if (f.size() < 42 || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17) continue;
    const uint16_t sport = uint16_t(f[34] << 8 | f[35]);
    if (sport < 1000 || sport >= 3000) continue;
    EXPECT_EQ(r.vlan, std::optional<uint16_t>(sport < 2000 ? last : first)) << "sport " << sport;
    EXPECT_EQ(f[14 + 8], 63);
    ++by_vlan[r.vlan];
  }
  EXPECT_EQ(by_vlan[last], kEach);
  EXPECT_EQ(by_vlan[first], kEach);
  const Counters c = quiet_counters();
  ASSERT_EQ(c.accounting.size(), size_t{kVlans} + 1);
  for (const std::string& name : {std::string("v1"), fmt::format("v{}", kVlans)}) {
    const Json p = port(c.accounting, name);
    EXPECT_EQ(p["rx_packets"].get<uint64_t>(), kEach) << p.dump();
    EXPECT_EQ(p["tx_packets"].get<uint64_t>(), kEach) << p.dump();
  }
  expect_every_port_exact(c.accounting);
}

// A NIC that strips tags on receive would hide them from XDP: while vecflowd runs, the
// trunk's receive VLAN offloads (on by default on a veth) are off; at stop they are back.
TEST_F(Vlan, TheTrunksReceiveVlanOffloadsAreOffWhileVecflowdRuns) {
  // "on" or "off", as `ethtool -k` shows the feature (its line: "NAME: on [fixed]").
  const auto feature = [&](const std::string& name) {
    const std::string all = lab_->exec_output('a', "ethtool -k wan0");
    const size_t at = all.find("\n" + name + ": ");
    if (at == std::string::npos) return std::string("missing");
    const size_t from = at + name.size() + 3;
    return all.substr(from, all.find_first_of(" \n", from) - from);
  };
  EXPECT_EQ(feature("rx-vlan-offload"), "off");
  EXPECT_EQ(feature("rx-vlan-stag-hw-parse"), "off");
  EXPECT_EQ(daemon_->stop(), 0) << log();
  daemon_.reset();
  EXPECT_EQ(feature("rx-vlan-offload"), "on") << "put back at stop";
  EXPECT_EQ(feature("rx-vlan-stag-hw-parse"), "on");
}

// The kernel side: with 802.1Q in the kernel vecflowd creates a VLAN's device when there is
// none and removes it at stop. Without it the VLAN runs without one, and `ports` says so.
TEST_F(Vlan, EachVlanHasItsKernelDeviceWhileVecflowdRunsOrSaysWhyNot) {
  const std::string device = "vl" + std::to_string(getpid() % 100000);
  Json lab;
  const Json ports = json("ports");
  for (const auto& p : ports["ports"])
    if (p["port"] == "lab") lab = p;
  ASSERT_FALSE(lab.is_null());
  EXPECT_EQ(lab["kind"], "vlan");
  EXPECT_EQ(lab["device"], device);
  EXPECT_EQ(lab["device_info"]["vlan.parent"], "wan") << lab.dump();
  EXPECT_EQ(lab["device_info"]["vlan.id"], "200") << lab.dump();
  const std::string kernel_device = lab["device_info"].value("vlan.kernel_device", "");
  const bool exists = lab_->exec('a', "ip link show " + device + " >/dev/null 2>&1") == 0;
  if (kernel_has_vlan_devices()) {
    EXPECT_EQ(kernel_device, "created") << lab.dump();
    EXPECT_TRUE(exists);
    EXPECT_EQ(daemon_->stop(), 0) << log();
    EXPECT_NE(lab_->exec('a', "ip link show " + device + " >/dev/null 2>&1"), 0)
        << "the VLAN device vecflowd created outlived it";
    daemon_.reset();
  } else {
    EXPECT_EQ(kernel_device, "none (no 802.1Q in the kernel)") << lab.dump();
    EXPECT_FALSE(exists);
    EXPECT_NE(log().find("this kernel has no VLAN devices"), std::string::npos) << log();
  }
}

constexpr const char* kCustomer10 = "02:00:00:00:0a:02";  // 10.10.0.2, QinQ 300/10
constexpr const char* kCustomer11 = "02:00:00:00:0b:02";  // 10.11.0.2, QinQ 300/11

// QinQ on the same trunk: a provider's service VLAN (802.1ad 300) with two customer VLANs
// inside it (802.1Q 10 and 11), each an L3 interface, beside an 802.1Q VLAN 100 and the
// trunk's own untagged network. A steering rule drops one customer's UDP to port 7 in XDP by
// both tags.
class Qinq : public Vlan {
 protected:
  std::string edit_config(std::string) override {
    return R"(appliance: {name: qinq-test}
cpu: {control: 0, workers: [1]}
dpdk: {memory_mb: 256, hugepages: auto, file_prefix: )" +
           name_ + R"(, mbufs: 8192}
ports:
  - {name: wan, type: afxdp, interface: wan0, queues: 1, mode: auto}
  - {name: c10, type: vlan, parent: svc, vlan: 10}
  - {name: svc, type: vlan, parent: wan, vlan: 300, proto: 802.1ad}
  - {name: c11, type: vlan, parent: svc, vlan: 11}
  - {name: office, type: vlan, parent: wan, vlan: 100}
steering:
  default: userspace
  rules:
    - {name: arp, match: {l3: arp}, action: pass}
    - {name: c11-echo, match: {port: wan, vlan: 300, inner_vlan: 11, proto: udp, dst_port: 7},
       action: drop}
pipeline:
  - stage: route
    routes:
      - {prefix: 10.1.0.0/24, port: office}
      - {prefix: 10.10.0.0/24, port: c10}
      - {prefix: 10.11.0.0/24, port: c11}
  - stage: neighbour
    fuse: true
    static:
      - {ip: 10.1.0.2, mac: ")" +
           kOfficeHost + R"(", port: office}
      - {ip: 10.10.0.2, mac: ")" +
           kCustomer10 + R"(", port: c10}
      - {ip: 10.11.0.2, mac: ")" +
           kCustomer11 + R"(", port: c11}
control:
  socket: )" +
           socket_ + "\n";
  }
};

// Customer 10 -> customer 11, customer 11 -> VLAN 100, VLAN 100 -> customer 10: each frame
// leaves with its egress interface's tags (both for a customer, the service tag outside),
// routed; frames of a customer VLAN no one claims, or the same ids under an 802.1Q outer tag,
// are vlan_unknown drops on the trunk; the dropped echo never reaches user space. Every
// port's accounting is exact.
TEST_F(Qinq, RoutesBetweenCustomerVlansAndAVlanWithTheRightTagsAndExactAccounting) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  const std::vector<std::pair<uint16_t, uint16_t>> c10 = {{0x88a8, 300}, {0x8100, 10}};
  const std::vector<std::pair<uint16_t, uint16_t>> c11 = {{0x88a8, 300}, {0x8100, 11}};
  constexpr uint16_t kEach = 30;
  for (uint16_t i = 0; i < kEach; ++i) {
    ASSERT_TRUE(trunk.send(udp_frame(wan, ip4(10, 10, 0, 2), ip4(10, 11, 0, 2), 1000 + i, c10)));
    ASSERT_TRUE(trunk.send(udp_frame(wan, ip4(10, 11, 0, 2), ip4(10, 1, 0, 2), 2000 + i, c11)));
    ASSERT_TRUE(
        trunk.send(udp_frame(wan, ip4(10, 1, 0, 2), ip4(10, 10, 0, 2), 3000 + i, {{0x8100, 100}})));
  }
  for (uint16_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(trunk.send(udp_frame(wan, ip4(10, 10, 0, 2), ip4(10, 11, 0, 2), 4000 + i,
                                     {{0x88a8, 300}, {0x8100, 12}})));  // nobody's customer
    ASSERT_TRUE(trunk.send(udp_frame(wan, ip4(10, 10, 0, 2), ip4(10, 11, 0, 2), 4100 + i,
                                     {{0x8100, 300}, {0x8100, 10}})));  // 802.1Q outside
    ASSERT_TRUE(trunk.send(udp_frame(wan, ip4(10, 11, 0, 2), ip4(10, 10, 0, 2), 4200 + i, c11,
                                     7)));  // dropped in XDP by its two tags
  }
  // (from, to) -> frames, with the tags each left with.
  std::map<std::pair<int, std::string>, unsigned> seen;
  for (const Received& r : trunk.drain(1500)) {
    // The kernel took the outer tag off (r.vlan); an inner one stays in the frame.
    Bytes f = r.frame;
    std::string tags;
    if (r.vlan) tags = fmt::format("{:04x}/{}", r.vlan_tpid, *r.vlan);
    if (f.size() > 18 && f[12] == 0x81 && f[13] == 0x00) {
      tags += fmt::format(" 8100/{}", (f[14] << 8 | f[15]) & 0x0fff);
      f.erase(f.begin() + 12, f.begin() + 16);
    }
    if (f.size() < 42 || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17) continue;
    const uint16_t sport = uint16_t(f[34] << 8 | f[35]);
    if (sport < 1000 || sport >= 5000) continue;  // not the test's
    EXPECT_LT(sport, 4000) << "forwarded a frame of no sub-interface, or the dropped echo";
    EXPECT_TRUE(std::equal(wan.begin(), wan.end(), f.begin() + 6));
    EXPECT_EQ(f[14 + 8], 63);
    EXPECT_TRUE(ipv4_checksum_ok(f));
    EXPECT_TRUE(l4_checksum_ok(f));
    const char* to = sport < 2000 ? kCustomer11 : sport < 3000 ? kOfficeHost : kCustomer10;
    const auto mac = mac_bytes(to);
    EXPECT_TRUE(std::equal(mac.begin(), mac.end(), f.begin())) << "sport " << sport;
    ++seen[{sport / 1000, tags}];
  }
  EXPECT_EQ((seen[{1, "88a8/300 8100/11"}]), kEach);
  EXPECT_EQ((seen[{2, "8100/100"}]), kEach);
  EXPECT_EQ((seen[{3, "88a8/300 8100/10"}]), kEach);
  EXPECT_EQ(seen.size(), 3u);

  const Counters c = quiet_counters();
  for (const char* name : {"c10", "c11", "office"}) {
    const Json p = port(c.accounting, name);
    EXPECT_EQ(p["rx_packets"].get<uint64_t>(), kEach) << p.dump();
    EXPECT_EQ(p["tx_packets"].get<uint64_t>(), kEach) << p.dump();
  }
  EXPECT_EQ(port(c.accounting, "svc")["rx_packets"].get<uint64_t>(), 0u);
  expect_every_port_exact(c.accounting);
  const Json w = port(c.accounting, "wan");
  EXPECT_EQ(w["port_dropped"].get<uint64_t>(), 10u) << w.dump();
  EXPECT_EQ(w["xdp"]["dropped"].get<uint64_t>(), 5u) << w.dump();
  EXPECT_EQ(w["in_rings"].get<int64_t>(), 0) << c.accounting.dump();
  const Json ports = json("ports");
  for (const auto& p : ports["ports"]) {
    if (p["port"] != "c10") continue;
    EXPECT_EQ(p["device_info"]["vlan.parent"], "svc") << p.dump();
    EXPECT_EQ(p["device_info"]["vlan.proto"], "802.1q") << p.dump();
  }
}

constexpr const char* kDevHost = "02:00:00:00:03:02";    // 10.3.0.2, VLAN 300 (added live)
constexpr const char* kSpareHost = "02:00:00:00:04:02";  // 10.4.0.2, VLAN 400 (removed live)

// VLAN ports added and removed by a reload while traffic runs on the others.
class VlanReload : public Vlan {
 protected:
  // The trunk with office (100) and lab (200), and `dev` (300) and `spare` (400) as asked,
  // each with its route and its host.
  std::string config_with(bool dev, bool spare) const {
    std::string ports, routes, hosts;
    const auto vlan = [&](const char* name, int id, const char* host) {
      ports += fmt::format("  - {{name: {}, type: vlan, parent: wan, vlan: {}}}\n", name, id);
      routes += fmt::format("      - {{prefix: 10.{}.0.0/24, port: {}}}\n", id / 100, name);
      hosts +=
          fmt::format("      - {{ip: 10.{}.0.2, mac: \"{}\", port: {}}}\n", id / 100, host, name);
    };
    vlan("office", 100, kOfficeHost);
    vlan("lab", 200, kLabHost);
    if (dev) vlan("dev", 300, kDevHost);
    if (spare) vlan("spare", 400, kSpareHost);
    return trunk_config(ports, routes, hosts);
  }
  std::string edit_config(std::string) override { return config_with(false, true); }

  // Reloads the file with `dev` and `spare` as asked; returns the reply.
  Json reload_with(bool dev, bool spare) {
    const std::string path = dir_ + "/next.yaml";
    std::ofstream(path) << config_with(dev, spare);
    return json("reload " + path);
  }

  // Frames from the host behind VLAN `vlan` (10.<vlan / 100>.0.2) to the office, source ports
  // from `first` up.
  void send_to_office(TaggedSocket& trunk, int vlan, uint16_t first, uint16_t count) {
    const uint8_t net = static_cast<uint8_t>(vlan / 100);
    for (uint16_t i = 0; i < count; ++i)
      ASSERT_TRUE(trunk.send(udp_frame(wan_mac(), ip4(10, net, 0, 2), ip4(10, 1, 0, 2), first + i,
                                       {{0x8100, static_cast<uint16_t>(vlan)}})));
  }

  // The frames of the bursts to the office that arrived (tagged 100), by burst (sport / 1000).
  static std::map<int, unsigned> office_bursts(const std::vector<Received>& frames) {
    std::map<int, unsigned> out;
    for (const Received& r : frames) {
      const Bytes& f = r.frame;
      if (f.size() < 42 || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17) continue;
      const uint16_t sport = uint16_t(f[34] << 8 | f[35]);
      if (sport >= 1000 && sport < 10000 && r.vlan == std::optional<uint16_t>(100))
        ++out[sport / 1000];
    }
    return out;
  }

  // The VLAN id `vecflowctl ports` gives a VLAN port.
  std::string vlan_id_of(const std::string& name) {
    const Json ports = json("ports");
    for (const auto& p : ports["ports"]) {
      if (p["port"] == name) return p["device_info"].value("vlan.id", std::string());
    }
    return "not running";
  }

  std::vector<std::string> running_ports() {
    std::vector<std::string> out;
    const Json ports = json("ports");
    for (const auto& p : ports["ports"])
      out.push_back(p["port"].get<std::string>());
    EXPECT_FALSE(out.empty()) << ports.dump();
    return out;
  }
};

// Office -> lab runs all along, a frame every half millisecond, while one reload adds VLAN
// 300 and removes VLAN 400 and another puts them back as they were. The office's frames all
// arrive (none lost to either reload), VLAN 300 forwards only while it is declared, VLAN
// 400's frames are vlan_unknown while it is not, and every port's accounting is exact, the
// removed ones' too (a port declared again keeps its id and its counters).
TEST_F(VlanReload, AddsAndRemovesVlansWithoutLossOnTheOthersAndExactAccounting) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  const auto wan = wan_mac();
  const auto burst = [&](int from_vlan, uint16_t first, uint16_t count) {
    send_to_office(trunk, from_vlan, first, count);
  };
  std::atomic<bool> streaming{true};
  std::atomic<unsigned> streamed{0};
  std::thread stream([&] {
    // Office -> lab, source ports from 10000 up.
    while (streaming.load() && streamed.load() < 50000) {
      const auto i = static_cast<uint16_t>(10000 + streamed.load());
      if (trunk.send(udp_frame(wan, ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), i, {{0x8100, 100}})))
        streamed.fetch_add(1);
      std::this_thread::sleep_for(500us);
    }
  });
  // Joined on every way out, a failed assertion's too.
  struct Join {
    std::atomic<bool>& flag;
    std::thread& t;
    ~Join() {
      flag = false;
      if (t.joinable()) t.join();
    }
  } join{streaming, stream};
  std::this_thread::sleep_for(300ms);
  burst(400, 1000, 10);  // spare, declared: forwarded
  std::this_thread::sleep_for(200ms);

  const Json added = reload_with(true, false);
  EXPECT_EQ(added["restart_required"], Json::array()) << added.dump();
  EXPECT_NE(std::ranges::find(added["applied"], "ports"), added["applied"].end()) << added.dump();
  EXPECT_EQ(running_ports(), (std::vector<std::string>{"wan", "office", "lab", "dev"}));
  std::this_thread::sleep_for(200ms);
  burst(300, 2000, 10);  // dev, added: forwarded
  burst(400, 3000, 10);  // spare, removed: vlan_unknown
  std::this_thread::sleep_for(200ms);

  const Json back = reload_with(false, true);
  EXPECT_EQ(back["restart_required"], Json::array()) << back.dump();
  EXPECT_EQ(running_ports(), (std::vector<std::string>{"wan", "office", "lab", "spare"}));
  std::this_thread::sleep_for(200ms);
  burst(400, 4000, 10);  // spare, declared again: forwarded
  burst(300, 5000, 10);  // dev, removed: vlan_unknown
  std::this_thread::sleep_for(300ms);
  streaming = false;
  stream.join();

  unsigned office = 0;
  const std::vector<Received> frames = trunk.drain(1500);
  for (const Received& r : frames) {
    const Bytes& f = r.frame;
    if (f.size() < 42 || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17) continue;
    if (uint16_t(f[34] << 8 | f[35]) < 10000) continue;
    EXPECT_EQ(r.vlan, std::optional<uint16_t>(200));
    ++office;
  }
  const std::map<int, unsigned> to_office = office_bursts(frames);
  RecordProperty("streamed", static_cast<int>(streamed.load()));
  RecordProperty("received", static_cast<int>(office));
  EXPECT_GT(streamed.load(), 1000u);
  EXPECT_EQ(office, streamed.load()) << "the untouched VLANs lost frames to the reloads";
  EXPECT_EQ(to_office, (std::map<int, unsigned>{{1, 10}, {2, 10}, {4, 10}}));

  const Counters c = quiet_counters();
  EXPECT_EQ(port(c.accounting, "office")["rx_packets"].get<uint64_t>(), streamed.load());
  EXPECT_EQ(port(c.accounting, "spare")["rx_packets"].get<uint64_t>(), 20u) << c.accounting.dump();
  EXPECT_EQ(port(c.accounting, "dev")["rx_packets"].get<uint64_t>(), 10u) << c.accounting.dump();
  expect_every_port_exact(c.accounting);
  const Json w = port(c.accounting, "wan");
  EXPECT_EQ(w["port_dropped"].get<uint64_t>(), 20u) << w.dump();
  EXPECT_EQ(w["in_rings"].get<int64_t>(), 0) << c.accounting.dump();
}

// A VLAN port moved to another VLAN id is replaced live under its name: the frames of the new
// id are its own from the reload on, those of the old one are the trunk's vlan_unknown, and
// its counters go on (one id, exact accounting).
TEST_F(VlanReload, AVlanPortMovedToAnotherVlanIdIsReplacedLive) {
  NetnsScope in_client(lab_->ns('c'));
  ASSERT_TRUE(in_client.ok());
  TaggedSocket trunk("eth0");
  ASSERT_TRUE(trunk.ok());
  send_to_office(trunk, 400, 1000, 10);  // spare on 400: forwarded
  std::this_thread::sleep_for(200ms);

  const std::string path = dir_ + "/moved.yaml";
  std::ofstream(path) << std::regex_replace(config_with(false, true), std::regex("vlan: 400"),
                                            "vlan: 401");
  const Json r = json("reload " + path);
  EXPECT_EQ(r["restart_required"], Json::array()) << r.dump();
  EXPECT_NE(r["summary"].dump().find("port spare: replaced, VLAN 401 of wan (was VLAN 400 of wan)"),
            std::string::npos)
      << r.dump();
  EXPECT_EQ(running_ports(), (std::vector<std::string>{"wan", "office", "lab", "spare"}));
  std::this_thread::sleep_for(200ms);
  send_to_office(trunk, 401, 2000, 10);  // spare on 401: forwarded
  send_to_office(trunk, 400, 3000, 10);  // 400, no one's now: vlan_unknown
  std::this_thread::sleep_for(300ms);

  EXPECT_EQ(office_bursts(trunk.drain(1000)), (std::map<int, unsigned>{{1, 10}, {2, 10}}));
  const Counters c = quiet_counters();
  EXPECT_EQ(port(c.accounting, "spare")["rx_packets"].get<uint64_t>(), 20u) << c.accounting.dump();
  expect_every_port_exact(c.accounting);
  EXPECT_EQ(port(c.accounting, "wan")["port_dropped"].get<uint64_t>(), 10u) << c.accounting.dump();
  EXPECT_EQ(vlan_id_of("spare"), "401");
}

// What a running vecflowd cannot change (a link added) is refused as "restart required", and
// the section runs as before, the VLAN port changed in the same file included.
TEST_F(VlanReload, ALinkAddedNeedsARestart) {
  std::string text = config_with(false, true);
  text = std::regex_replace(text, std::regex("vlan: 400"), "vlan: 401");
  text = std::regex_replace(text, std::regex("(  - \\{name: wan, [^\n]*\n)"),
                            "$1  - {name: extra, type: afxdp, interface: lo, queues: 1}\n");
  std::ofstream(dir_ + "/next.yaml") << text;
  const Exec reply = ctl("--json reload " + dir_ + "/next.yaml");
  ASSERT_EQ(reply.rc, 0) << reply.out << reply.err;
  const Json r = Json::parse(reply.out);
  ASSERT_EQ(r["restart_required"].size(), 1u) << r.dump();
  EXPECT_EQ(r["restart_required"][0]["section"], "ports");
  const std::string why = r["restart_required"][0]["reasons"].dump();
  EXPECT_NE(why.find("port extra (afxdp) added"), std::string::npos) << why;
  EXPECT_EQ(running_ports(), (std::vector<std::string>{"wan", "office", "lab", "spare"}));
  EXPECT_EQ(vlan_id_of("spare"), "400");
}

}  // namespace
}  // namespace vecflow::test
