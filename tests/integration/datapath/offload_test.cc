// Flow offload to XDP on the demo topology (wan: vecflowd's AF_XDP port and steering program;
// lan: DPDK's net_af_xdp with the program vecflowd adopts): a UDP flood from the client to the
// server is decided in user space, then forwarded by the steering program on wan0, every
// frame delivered and every frame accounted, XDP's verdicts and user space's; a change of the
// rules takes the flows back to user space within a sweep; a full table keeps forwarding through
// user space; idle entries go; a capture keeps every flow in sight; a pipeline with a stage
// that is not offloadable says so and offloads nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "forwarding_fixture.h"
#include "steer/program.h"

// Offload gates open at a flow's last lifted packet where XDP metadata numbers the packets; on a
// kernel that refuses the metadata (steer/program.h) they open 20 ms after the entry came, when
// a 4 MiB transfer here is over, and per-flow order across the switch is not kept exactly.
#define VECFLOW_REQUIRE_XDP_METADATA(what)                                  \
  do {                                                                      \
    if (!::vecflow::steer::kernel_allows_xdp_metadata())                    \
      GTEST_SKIP() << "this kernel refuses XDP metadata, which " << (what); \
  } while (0)

namespace vecflow::test {
namespace {

constexpr const char* kWan = "wan";

// The demo with an `offload` section (`settings`: its keys, one line each, indented by four).
std::string with_offload(std::string text, const std::string& settings) {
  return text + "\noffload:\n    enabled: true\n" + settings;
}

class Offload : public Forwarding {
 protected:
  std::string edit_config(std::string text) override {
    return with_offload(std::move(text), "    sweep_ms: 50\n" + extra_settings());
  }
  virtual std::string extra_settings() const { return ""; }

  // Sends `count` datagrams of `flows` flows to the server's flood port at `rate` pps and
  // returns the receiver's report.
  // `wait_s`: how long the receiver waits for a first frame.
  Json flood(uint64_t count, unsigned flows, unsigned rate, unsigned wait_s = 60) {
    const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
    const std::string recv_json = dir_ + "/recv.json";
    std::thread receiver([&] {
      lab_->exec('s', std::string(TRAFGEN_PATH) + " recv --dev eth0 --idle-exit 1500 --duration " +
                          std::to_string(wait_s) + " --json > " + recv_json);
    });
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(lab_->exec('c', std::string(TRAFGEN_PATH) +
                                  " send --dev eth0 --dst 198.51.100.2 --dst-mac " +
                                  wan_mac.substr(0, 17) + " --flows " + std::to_string(flows) +
                                  " --size 60 --rate " + std::to_string(rate) + " --dst-port " +
                                  std::to_string(kFloodPort) + " --count " + std::to_string(count) +
                                  " > /dev/null"),
              0);
    receiver.join();
    return Json::parse(std::ifstream(recv_json));
  }

  static uint64_t xdp(const Json& steering, const std::string& key) {
    const Json p = port(steering["ports"], kWan);
    return p.is_null() ? 0 : p[key].get<uint64_t>();
  }

  // XDP's verdicts on wan add up to what it saw, and user space's accounting is exact.
  void expect_accounted(const Counters& c) {
    expect_exact(c.accounting);
    const Json p = port(c.steering["ports"], kWan);
    uint64_t verdicts = 0;
    for (const char* v : {"pass", "drop", "userspace", "tx", "redirect", "offload"})
      verdicts += p[v].get<uint64_t>();
    EXPECT_EQ(p["rx_packets"].get<uint64_t>(), verdicts) << p.dump();
  }

  // The offload view's flows from wan to lan.
  size_t wan_flows(const Json& offload) {
    size_t n = 0;
    for (const auto& f : offload["flows"])
      if (f["in"] == kWan && f["out"] == "lan") ++n;
    return n;
  }

  // A TCP transfer of `bytes` from host `from` to port 5001 of host `to` at `to_ip`; whether
  // it arrived whole.
  bool transfer(size_t bytes, char from = 'c', char to = 's',
                const std::string& to_ip = "198.51.100.2") {
    const std::string in = dir_ + "/in", out = dir_ + "/out";
    EXPECT_EQ(run("head -c " + std::to_string(bytes) + " /dev/urandom > " + in).rc, 0);
    std::thread server([&] { lab_->exec(to, "timeout 30 nc -d -l -p 5001 > " + out); });
    for (int i = 0; i < 100 && lab_->exec(to, "ss -Htln sport = :5001 | grep -q .") != 0; ++i)
      std::this_thread::sleep_for(100ms);
    EXPECT_EQ(lab_->exec(from, "timeout 30 nc -N -w 5 " + to_ip + " 5001 < " + in), 0);
    server.join();
    return run("cmp " + in + " " + out).rc == 0;
  }

  // A flood of 2000 datagrams in 2 flows arrives whole and none of it through XDP.
  void expect_flood_stays_in_user_space() {
    const Counters before = quiet_counters();
    const Json rx = flood(2000, 2, 20000);
    EXPECT_EQ(rx["received"].get<uint64_t>(), 2000u);
    const Counters after = quiet_counters();
    EXPECT_EQ(xdp(after.steering, "offload"), xdp(before.steering, "offload"));
    EXPECT_EQ(wan_flows(json("offload")), 0u);
  }

  // A flood that arrives whole, with the counters around it and what XDP forwarded of it;
  // XDP's and user space's accounting are checked exact after it.
  struct Flood {
    Json rx;
    Counters before, after;
    uint64_t offloaded = 0;
  };
  Flood whole_flood(uint64_t count, unsigned flows, unsigned rate) {
    Flood f;
    f.before = quiet_counters();
    f.rx = flood(count, flows, rate);
    f.after = quiet_counters();
    EXPECT_EQ(f.rx["received"].get<uint64_t>(), count) << f.rx.dump();
    expect_accounted(f.after);
    f.offloaded = xdp(f.after.steering, "offload") - xdp(f.before.steering, "offload");
    return f;
  }

  // 3000 datagrams in 2 flows that what now decides them stops: none arrives, none goes
  // through XDP's offload, and the accounting is exact. Returns the counters before and after.
  std::pair<Counters, Counters> stopped_flood() {
    Counters before = quiet_counters();
    const Json rx = flood(3000, 2, 20000, 3);
    EXPECT_EQ(rx.value("received", uint64_t{0}), 0u) << rx.dump();
    Counters after = quiet_counters();
    expect_accounted(after);
    EXPECT_EQ(xdp(after.steering, "offload"), xdp(before.steering, "offload"));
    return {std::move(before), std::move(after)};
  }

  // Reloads the configuration `text`, written to `name` in the test's directory.
  void reload_with(const std::string& text, const std::string& name) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    const Json reply = json("reload " + path);
    ASSERT_FALSE(reply.is_null());
    ASSERT_FALSE(reply.contains("error")) << reply.dump();
  }

  // Waits until the view has `want` flows from wan to lan (up to 3 s); returns the view.
  Json wait_flows(size_t want) {
    Json o;
    for (int i = 0; i < 30; ++i) {
      o = json("offload");
      if (wan_flows(o) == want) break;
      std::this_thread::sleep_for(100ms);
    }
    return o;
  }
};

TEST_F(Offload, AFloodIsForwardedInXdpAfterItsFirstPacketsWithEveryFrameAccounted) {
  constexpr uint64_t kPackets = 40000;
  // Delivered whole, whichever path carried each frame.
  const auto [rx, before, after, offloaded] = whole_flood(kPackets, 4, 40000);
  const uint64_t lifted = xdp(after.steering, "userspace") - xdp(before.steering, "userspace");
  // User space decided each flow's first packets, XDP forwarded the rest.
  EXPECT_GE(offloaded, kPackets * 9 / 10) << after.steering.dump();
  EXPECT_GE(lifted, 4u);
  // Every frame left once: transmitted by user space (charged to wan, where it entered) or
  // by XDP.
  const Json wan = port(after.accounting, kWan);
  const Json wan0 = port(before.accounting, kWan);
  EXPECT_EQ(wan["tx_packets"].get<uint64_t>() - wan0["tx_packets"].get<uint64_t>() + offloaded,
            kPackets);
  const Json o = json("offload");
  EXPECT_EQ(o["summary"]["state"], "on") << o.dump();
  EXPECT_EQ(wan_flows(o), 4u) << o.dump();
  uint64_t hits = 0;
  for (const auto& f : o["flows"]) {
    EXPECT_EQ(f["ttl"], "decrement");
    if (f["in"] == kWan) hits += f["packets"].get<uint64_t>();
  }
  // The view's hits are the XDP verdicts of these flows.
  EXPECT_EQ(hits, offloaded) << o.dump();
  EXPECT_EQ(rx["socket_drops"].get<uint64_t>(), 0u);
}

// Order across the switch: while a flow's first packets are still in user space (in the AF_XDP
// ring, a vector, the tx ring) its entry is installed, and XDP would send the next ones ahead
// of them; the entry's gate keeps lifting them until the last one lifted has left. Two flows
// at 5000 pps each pause 200 us between packets, longer than a packet's way through user
// space: every gate opens by a worker's settle, none is forced, and nothing is reordered.
TEST_F(Offload, FlowsKeepTheirOrderAcrossTheSwitchToXdp) {
  VECFLOW_REQUIRE_XDP_METADATA("the order gates need");
  constexpr uint64_t kPackets = 6000;
  const Flood f = whole_flood(kPackets, 2, 10000);
  EXPECT_EQ(f.rx["reordered"].get<uint64_t>(), 0u) << f.rx.dump();
  EXPECT_GE(f.offloaded, kPackets * 9 / 10) << f.after.steering.dump();
  const Json o = json("offload");
  EXPECT_GE(o["summary"]["gates_opened"].get<uint64_t>(), 2u) << o.dump();
  EXPECT_EQ(o["summary"]["gates_forced"].get<uint64_t>(), 0u) << o.dump();
  EXPECT_EQ(wan_flows(o), 2u) << o.dump();
  for (const auto& f : o["flows"])
    EXPECT_EQ(f["gate"], "open") << o.dump();
}

// A frame XDP hands to the egress interface is counted as offloaded then; one the kernel loses
// afterwards is counted where the kernel reports it. The server's end of lan0 stops taking XDP
// frames (GRO off and no XDP program: its NAPI stops), so the kernel refuses every frame
// offloaded toward lan0 (6.18 refuses the redirect itself, as lan0 no longer offers
// ndo_xdp_xmit; older kernels drop it at the bulk transmit): lan's xmit_drops counts each one,
// and what the server received plus those is every frame of the flood.
TEST_F(Offload, FramesTheEgressDriverRefusesAreCountedOnItsPort) {
  flood(4000, 2, 20000);
  ASSERT_EQ(wan_flows(wait_flows(2)), 2u) << json("offload").dump();
  ASSERT_EQ(lab_->exec('s', "ethtool -K eth0 gro off"), 0);
  const Counters before = quiet_counters();
  constexpr uint64_t kPackets = 3000;
  const Json rx = flood(kPackets, 2, 20000, 3);
  const Counters after = quiet_counters();
  expect_accounted(after);
  auto lan = [](const Counters& c, const char* key) {
    const Json p = port(c.steering["ports"], "lan");
    return p.is_null() ? uint64_t{0} : p[key].get<uint64_t>();
  };
  const uint64_t offloaded = xdp(after.steering, "offload") - xdp(before.steering, "offload");
  const uint64_t refused = lan(after, "xmit_drops") - lan(before, "xmit_drops");
  const uint64_t by_user_space = port(after.accounting, kWan)["tx_packets"].get<uint64_t>() -
                                 port(before.accounting, kWan)["tx_packets"].get<uint64_t>();
  const uint64_t received = rx.value("received", uint64_t{0});
  EXPECT_GT(offloaded, kPackets / 2) << after.steering.dump();
  EXPECT_EQ(refused, offloaded) << "every frame XDP sent toward the server was refused";
  EXPECT_EQ(by_user_space + offloaded, kPackets);
  EXPECT_EQ(received + refused, kPackets) << rx.dump();
}

TEST_F(Offload, ARuleChangeTakesOffloadedFlowsBackToUserSpaceWithinASweep) {
  const Json first = flood(5000, 2, 20000);
  EXPECT_EQ(first["received"].get<uint64_t>(), 5000u);
  ASSERT_EQ(wan_flows(wait_flows(2)), 2u) << json("offload").dump() << log();
  // The ACL now denies the flood: offloaded flows must not keep going around it.
  std::string text = std::regex_replace(
      edit_config(test_config(socket_, name_)), std::regex("dst_port: 23\\}"),
      "dst_port: 23}\n      - {name: no-flood, action: deny, proto: udp, dst_port: " +
          std::to_string(kFloodPort) + "}");
  reload_with(text, "deny.yaml");
  // One sweep (50 ms) later, and some slack for the control lcore.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(json("offload")["flows"].size(), 0u);
  stopped_flood();
  // Every datagram met the new rule in user space (its count may lag by a sample).
  uint64_t denied = 0;
  for (int i = 0; i < 30 && denied != 3000; ++i) {
    const Json acl = json("acl");
    for (const auto& r : acl["rules"])
      if (r["rule"] == "no-flood") denied = r["packets"].get<uint64_t>();
    if (denied != 3000) std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(denied, 3000u) << json("acl").dump();
  EXPECT_EQ(json("offload")["flows"].size(), 0u);
}

TEST_F(Offload, ANeighbourChangeIsFollowedWithinASweep) {
  flood(4000, 2, 20000);
  Json o = wait_flows(2);
  ASSERT_EQ(wan_flows(o), 2u) << o.dump();
  const std::string server_mac = lab_->exec_output('s', "cat /sys/class/net/eth0/address");
  for (const auto& f : o["flows"]) {
    if (f["in"] == kWan) {
      EXPECT_EQ(f["next_hop_mac"], server_mac.substr(0, 17));
    }
  }
  // The appliance's kernel now gives the server another address (KernelSync follows it).
  constexpr const char* kMoved = "02:00:00:00:00:99";
  ASSERT_EQ(lab_->exec('a', std::string("ip neigh replace 198.51.100.2 lladdr ") + kMoved +
                                " dev lan0 nud permanent"),
            0);
  EXPECT_EQ(wan_flows(wait_flows(0)), 0u);
  flood(4000, 2, 20000, 3);
  o = wait_flows(2);
  ASSERT_EQ(wan_flows(o), 2u) << o.dump();
  for (const auto& f : o["flows"]) {
    if (f["in"] == kWan) {
      EXPECT_EQ(f["next_hop_mac"], kMoved) << o.dump();
    }
  }
}

// The route stage imports the kernel's routes too: a route the kernel gains takes the offloaded
// flows back (the route table's rebuild counts as a change) and the new route decides them.
class OffloadKernelRoutes : public Offload {
 protected:
  std::string edit_config(std::string text) override {
    return Offload::edit_config(
        std::regex_replace(text, std::regex("  - stage: route\n    fuse: true\n"),
                           "  - stage: route\n    fuse: true\n    from_kernel: true\n"));
  }
};

TEST_F(OffloadKernelRoutes, AKernelRouteChangeIsFollowedWithinASweep) {
  // A fresh lab's kernel still adds routes of its own (IPv6 addresses settling), each a change.
  quiet_counters();
  EXPECT_EQ(flood(4000, 2, 20000)["received"].get<uint64_t>(), 4000u);
  ASSERT_EQ(wan_flows(wait_flows(2)), 2u) << json("offload").dump() << log();
  // The server's address is now blackholed in the appliance's kernel.
  ASSERT_EQ(lab_->exec('a', "ip route add blackhole 198.51.100.2/32"), 0);
  EXPECT_EQ(wan_flows(wait_flows(0)), 0u) << json("offload").dump();
  stopped_flood();
  EXPECT_EQ(wan_flows(json("offload")), 0u);
  // And back: the route goes, the flood arrives whole and is offloaded again.
  ASSERT_EQ(lab_->exec('a', "ip route del blackhole 198.51.100.2/32"), 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(whole_flood(4000, 2, 20000).offloaded, 0u);
}

// A steering rule that a reload changes to drop the flood in XDP: the offloaded flows go at once
// (a reload flushes), and the new rule, not a stale entry, meets every later frame.
TEST_F(Offload, ASteeringRuleChangeIsFollowedAtTheReload) {
  EXPECT_EQ(flood(4000, 2, 20000)["received"].get<uint64_t>(), 4000u);
  ASSERT_EQ(wan_flows(wait_flows(2)), 2u) << json("offload").dump() << log();
  // The flood's own rule (forwarding_fixture.h) now drops it.
  std::string text = std::regex_replace(
      edit_config(test_config(socket_, name_)),
      std::regex("(name: flood, match: \\{[^}]*\\}, action:) userspace"), "$1 drop");
  ASSERT_NE(text.find("action: drop}"), std::string::npos);
  reload_with(text, "steer-drop.yaml");
  EXPECT_EQ(wan_flows(wait_flows(0)), 0u);
  const auto [before, after] = stopped_flood();
  const Json wan = port(after.steering["ports"], kWan);
  const Json wan0 = port(before.steering["ports"], kWan);
  EXPECT_EQ(wan["drop"].get<uint64_t>() - wan0["drop"].get<uint64_t>(), 3000u) << wan.dump();
}

class OffloadSmallTable : public Offload {
 protected:
  std::string extra_settings() const override { return "    table_size: 16\n"; }
};

TEST_F(OffloadSmallTable, AFullTableKeepsForwardingThroughUserSpace) {
  constexpr uint64_t kPackets = 12800;
  const Json rx = flood(kPackets, 64, 20000);
  EXPECT_EQ(rx["received"].get<uint64_t>(), kPackets) << rx.dump();
  const Json o = json("offload");
  EXPECT_EQ(wan_flows(o), 16u) << o.dump();
  uint64_t full = 0;
  for (const auto& r : o["refusals"])
    if (r["reason"] == "table_full") full = r["count"].get<uint64_t>();
  EXPECT_GE(full, 48u) << o.dump();
  expect_accounted(quiet_counters());
}

class OffloadShortIdle : public Offload {
 protected:
  std::string extra_settings() const override { return "    idle_timeout_ms: 300\n"; }
};

TEST_F(OffloadShortIdle, IdleEntriesAreRemoved) {
  flood(4000, 4, 20000);
  // The flows stopped with the flood: within the idle timeout and a sweep they are gone.
  const Json o = wait_flows(0);
  EXPECT_EQ(wan_flows(o), 0u) << o.dump();
  EXPECT_GE(o["summary"]["idle_removed"].get<uint64_t>(), 4u) << o.dump();
}

TEST_F(Offload, ACaptureKeepsEveryFlowInUserSpace) {
  flood(4000, 2, 20000);
  ASSERT_EQ(wan_flows(wait_flows(2)), 2u);
  ASSERT_EQ(ctl("capture start wan --count 1000000").rc, 0);
  Json o = wait_flows(0);
  EXPECT_EQ(o["summary"]["state"], "paused") << o.dump();
  const Counters before = quiet_counters();
  flood(2000, 2, 20000);
  const Counters after = quiet_counters();
  EXPECT_EQ(xdp(after.steering, "offload"), xdp(before.steering, "offload"));
  EXPECT_EQ(json("offload")["flows"].size(), 0u);
  ASSERT_EQ(ctl("capture stop").rc, 0);
}

class OffloadBlocked : public Offload {
 protected:
  std::string edit_config(std::string text) override {
    return Offload::edit_config(
        replace_demo_acl(std::move(text), "  - stage: dscp\n    sched: atomic\n    dscp: 10"));
  }
};

TEST_F(OffloadBlocked, APipelineWithAStageThatIsNotOffloadableOffloadsNothing) {
  expect_flood_stays_in_user_space();
  const Json o = json("offload");
  EXPECT_EQ(o["summary"]["state"], "blocked");
  EXPECT_NE(o["summary"]["why"].get<std::string>().find("dscp"), std::string::npos) << o.dump();
}

// The stateful firewall (conntrack, invalid packets dropped, an ACL on the connection's state):
// a connection's flows are offloaded once it is established, and its FIN, which XDP sends to
// user space, still closes it.
class OffloadStateful : public Offload {
 protected:
  std::string edit_config(std::string text) override {
    return Offload::edit_config(with_stateful_firewall(std::move(text)));
  }
};

TEST_F(OffloadStateful, AnEstablishedTransferIsOffloadedAndItsFinStillClosesIt) {
  VECFLOW_REQUIRE_XDP_METADATA("opens the gates before a short transfer ends");
  const Counters before = quiet_counters();
  ASSERT_TRUE(transfer(4u << 20)) << "the server got other bytes";
  const Counters after = quiet_counters();
  expect_accounted(after);
  const uint64_t offloaded = xdp(after.steering, "offload") - xdp(before.steering, "offload");
  // 4 MiB is ~2900 full segments: most of them, and of the ACKs, left through XDP.
  EXPECT_GT(offloaded, 1000u) << json("offload").dump();
  const Json o = json("offload");
  EXPECT_EQ(o["summary"]["state"], "on") << o.dump();
  // The connection ended in user space: both FINs were seen there.
  const Json s = json("sessions --port 5001");
  ASSERT_EQ(s["matched"], 1) << s.dump();
  const std::string state = s["session"]["state"].get<std::string>();
  EXPECT_TRUE(state == "time_wait" || state == "close") << s.dump();
  EXPECT_EQ(s["session"]["offloaded"], true) << s.dump();
  // Nothing was refused as invalid: the offloaded connection's windows were not checked.
  const Json errors = json("errors");
  uint64_t invalid = 0;
  for (const auto& r : errors["reasons"])
    if (r["reason"] == "ct_invalid") invalid = r["count"].get<uint64_t>();
  EXPECT_EQ(invalid, 0u) << errors.dump();
}

// The same transfer ended by the client's RST (SO_LINGER 0) after its 4 MiB were acknowledged:
// XDP hands the RST to user space, where the liberal session takes it (invalid: drop would
// have dropped it as out of window otherwise) and closes.
TEST_F(OffloadStateful, AnOffloadedTransferEndedByRstClosesItsSession) {
  VECFLOW_REQUIRE_XDP_METADATA("opens the gates before a short transfer ends");
  const std::string in = dir_ + "/in";
  ASSERT_EQ(run("head -c " + std::to_string(4u << 20) + " /dev/urandom > " + in).rc, 0);
  const Counters before = quiet_counters();
  std::thread server([&] { lab_->exec('s', "timeout 30 nc -d -l -p 5001 > /dev/null"); });
  for (int i = 0; i < 100 && lab_->exec('s', "ss -Htln sport = :5001 | grep -q .") != 0; ++i)
    std::this_thread::sleep_for(100ms);
  // Sent, given a second to be acknowledged, then aborted.
  const std::string client = dir_ + "/rst_client.py";
  std::ofstream(client)
      << "import socket, struct, sys, time\n"
         "s = socket.create_connection(('198.51.100.2', 5001))\n"
         "s.sendall(open(sys.argv[1], 'rb').read())\n"
         "time.sleep(1)\n"
         "s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n"
         "s.close()\n";
  EXPECT_EQ(lab_->exec('c', "timeout 30 python3 " + client + " " + in), 0);
  server.join();
  const Counters after = quiet_counters();
  expect_accounted(after);
  EXPECT_GT(xdp(after.steering, "offload") - xdp(before.steering, "offload"), 1000u)
      << json("offload").dump();
  const Json s = json("sessions --port 5001");
  // Closed, or already gone.
  EXPECT_TRUE(s["matched"] == 0 || s["session"]["state"] == "close") << s.dump();
  const Json errors = json("errors");
  uint64_t invalid = 0;
  for (const auto& r : errors["reasons"])
    if (r["reason"] == "ct_invalid") invalid = r["count"].get<uint64_t>();
  EXPECT_EQ(invalid, 0u) << errors.dump();
}

TEST_F(OffloadStateful, FlowsNotEstablishedStayInUserSpace) {
  // The flood's flows are new from wan, and the server never answers: never established,
  // they stay in user space.
  expect_flood_stays_in_user_space();
}

// Source NAT from lan to wan: the connection's flows are offloaded with their translation,
// the lan host's data rewritten to the pool address and port in XDP, the wan host's ACKs back.
class OffloadNat : public Offload {
 protected:
  std::string edit_config(std::string text) override {
    return Offload::edit_config(replace_demo_acl(std::move(text), R"(  - stage: conntrack
    sched: atomic
    nat:
      snat:
        - {in_port: lan, src: 198.51.100.0/24, to: 192.0.2.1, ports: 20000-29999})"));
  }
};

TEST_F(OffloadNat, ATranslatedTransferIsOffloadedWithItsTranslation) {
  VECFLOW_REQUIRE_XDP_METADATA("opens the gates before a short transfer ends");
  const Counters before = quiet_counters();
  ASSERT_TRUE(transfer(4u << 20, 's', 'c', "192.0.2.2")) << "the wan host got other bytes";
  const Counters after = quiet_counters();
  expect_accounted(after);
  auto offloaded = [&](const std::string& p) {
    auto at = [&](const Counters& c) {
      const Json row = port(c.steering["ports"], p);
      return row.is_null() ? uint64_t{0} : row["offload"].get<uint64_t>();
    };
    return at(after) - at(before);
  };
  // The data (lan to wan, source translated) and the ACKs (wan to lan, translated back).
  EXPECT_GT(offloaded("lan"), 1000u) << json("offload").dump();
  EXPECT_GT(offloaded("wan"), 10u) << json("offload").dump();
  // The view shows each direction's rewrite.
  const Json o = json("offload");
  std::string nats;
  for (const auto& f : o["flows"])
    nats += f["nat"].get<std::string>() + ";";
  EXPECT_TRUE(std::regex_search(nats, std::regex("src as 192\\.0\\.2\\.1:2[0-9]{4}"))) << o.dump();
  EXPECT_NE(nats.find("dst as 198.51.100.2:"), std::string::npos) << o.dump();
  const Json tcp = json("sessions --address 192.0.2.2 --port 5001");
  ASSERT_EQ(tcp["matched"], 1) << tcp.dump();
  EXPECT_TRUE(std::regex_match(tcp["session"]["nat"].get<std::string>(),
                               std::regex("src as 192\\.0\\.2\\.1:2[0-9]{4}")))
      << tcp.dump();
}

// A reload that gives the source NAT another port range: the offloaded flows go at the reload,
// and a new connection is offloaded with a translation from the new range only.
TEST_F(OffloadNat, ANatRuleChangeIsFollowedAtTheReload) {
  ASSERT_TRUE(transfer(1u << 20, 's', 'c', "192.0.2.2"));
  ASSERT_FALSE(json("offload")["flows"].empty()) << json("offload").dump();
  reload_with(std::regex_replace(edit_config(test_config(socket_, name_)),
                                 std::regex("ports: 20000-29999"), "ports: 30000-30999"),
              "nat-range.yaml");
  Json o;
  for (int i = 0; i < 30 && !(o = json("offload"))["flows"].empty(); ++i)
    std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(o["flows"].empty()) << o.dump();
  ASSERT_TRUE(transfer(1u << 20, 's', 'c', "192.0.2.2"));
  o = json("offload");
  size_t translated = 0;
  for (const auto& f : o["flows"]) {
    const std::string nat = f["nat"].get<std::string>();
    if (nat.find("src as") == std::string::npos) continue;
    ++translated;
    EXPECT_TRUE(std::regex_search(nat, std::regex("src as 192\\.0\\.2\\.1:30[0-9]{3}")))
        << o.dump();
  }
  EXPECT_GE(translated, 1u) << o.dump();
  expect_accounted(quiet_counters());
}

}  // namespace
}  // namespace vecflow::test
