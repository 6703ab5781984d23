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
  const Counters before = quiet_counters();
  constexpr uint64_t kPackets = 40000;
  const Json rx = flood(kPackets, 4, 40000);
  const Counters after = quiet_counters();
  // Delivered whole, whichever path carried each frame.
  EXPECT_EQ(rx["received"].get<uint64_t>(), kPackets) << rx.dump();
  expect_accounted(after);
  const uint64_t offloaded = xdp(after.steering, "offload") - xdp(before.steering, "offload");
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

TEST_F(Offload, ARuleChangeTakesOffloadedFlowsBackToUserSpaceWithinASweep) {
  const Json first = flood(5000, 2, 20000);
  EXPECT_EQ(first["received"].get<uint64_t>(), 5000u);
  ASSERT_EQ(wan_flows(wait_flows(2)), 2u) << json("offload").dump() << log();
  // The ACL now denies the flood: offloaded flows must not keep going around it.
  std::string text = std::regex_replace(
      edit_config(test_config(socket_, name_)), std::regex("dst_port: 23\\}"),
      "dst_port: 23}\n      - {name: no-flood, action: deny, proto: udp, dst_port: " +
          std::to_string(kFloodPort) + "}");
  const std::string path = dir_ + "/deny.yaml";
  std::ofstream(path) << text;
  Json reply = json("reload " + path);
  ASSERT_FALSE(reply.is_null());
  // One sweep (50 ms) later, and some slack for the control lcore.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(json("offload")["flows"].size(), 0u);
  const Counters before = quiet_counters();
  const Json second = flood(3000, 2, 20000, 3);
  EXPECT_EQ(second.value("received", uint64_t{0}), 0u) << second.dump();
  const Counters after = quiet_counters();
  expect_accounted(after);
  EXPECT_EQ(xdp(after.steering, "offload"), xdp(before.steering, "offload"));
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
  const Counters before = quiet_counters();
  const Json rx = flood(2000, 2, 20000);
  EXPECT_EQ(rx["received"].get<uint64_t>(), 2000u);
  const Counters after = quiet_counters();
  EXPECT_EQ(xdp(after.steering, "offload"), xdp(before.steering, "offload"));
  const Json o = json("offload");
  EXPECT_EQ(o["summary"]["state"], "blocked");
  EXPECT_NE(o["summary"]["why"].get<std::string>().find("dscp"), std::string::npos) << o.dump();
}

}  // namespace
}  // namespace vecflow::test
