// `vecflowctl reload` of the pipeline section while vecflowd forwards, on the demo topology:
// a route added under a running flood takes effect without losing a packet (each was decided
// by the old table, dropped as no_route, or by the new one, and arrived), an ACL rule added
// stops the flow, and changes the running data path cannot take (a stage added, ports, cpu,
// scheduler) are refused with their reasons while the old configuration keeps forwarding.
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "forwarding_fixture.h"

namespace vecflow::test {
namespace {

// A prefix the demo does not route; the server's host is the next hop toward it.
constexpr const char* kNewPrefixHost = "203.0.113.9";
constexpr const char* kNewRoute =
    "      - {prefix: 203.0.113.0/24, via: 198.51.100.2, port: lan}\n";
constexpr const char* kLastRoute = "      - {prefix: 192.0.2.0/24, port: wan}\n";

class PipelineReload : public Forwarding {
 protected:
  // The running file with each (from, to) applied once, written as `name` in the test's
  // directory; returns its path.
  std::string variant(const std::string& name,
                      const std::vector<std::pair<std::string, std::string>>& edits) {
    std::string text = test_config(socket_, name_);
    for (const auto& [from, to] : edits) {
      size_t at = text.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) text.replace(at, from.size(), to);
    }
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // Sends `count` UDP frames (256 flows, to port kFloodPort, which a steering rule of its own
  // lifts) from the client to `dst` at `rate` pps; the server's receiver counts what arrives.
  // `during` runs while the frames are sent. Returns the frames the server received.
  uint64_t flood(const std::string& dst, uint64_t count, unsigned rate,
                 const std::function<void()>& during = {}) {
    const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
    const std::string out = dir_ + "/recv.json";
    const unsigned seconds = static_cast<unsigned>(count / rate) + 3;
    std::thread receiver([&] {
      lab_->exec('s', std::string(TRAFGEN_PATH) + " recv --dev eth0 --idle-exit 1500 --duration " +
                          std::to_string(seconds) + " --json > " + out);
    });
    std::this_thread::sleep_for(300ms);
    std::thread sender([&] {
      EXPECT_EQ(lab_->exec('c', std::string(TRAFGEN_PATH) + " send --dev eth0 --dst " + dst +
                                    " --dst-mac " + wan_mac.substr(0, 17) +
                                    " --flows 256 --size 60 --rate " + std::to_string(rate) +
                                    " --dst-port " + std::to_string(kFloodPort) + " --count " +
                                    std::to_string(count) + " > /dev/null"),
                0);
    });
    if (during) during();
    sender.join();
    receiver.join();
    Json rx = Json::parse(std::ifstream(out));
    EXPECT_EQ(rx["socket_drops"].get<uint64_t>(), 0u);
    return rx["received"].get<uint64_t>();
  }

  Json route_stage() { return json("routes")["stages"][0]; }

  uint64_t acl_packets(const std::string& rule) {
    const Json acl = json("acl");
    for (const auto& r : acl["rules"])
      if (r["rule"] == rule) return r["packets"].get<uint64_t>();
    return 0;
  }

  static bool has(const Json& list, const std::string& item) {
    for (const auto& x : list)
      if (x == item) return true;
    return false;
  }
};

TEST_F(PipelineReload, RouteAndAclChangesApplyUnderTrafficWithExactAccounting) {
  // A route to a new prefix, added while a flood toward it runs.
  const std::string with_route =
      variant("route.yaml", {{kLastRoute, std::string(kLastRoute) + kNewRoute}});
  Json r0 = route_stage();
  Json acc0 = settled_accounting();
  constexpr uint64_t kFlood = 20000;
  Json reply;
  uint64_t received = flood(kNewPrefixHost, kFlood, 10000, [&] {
    std::this_thread::sleep_for(700ms);
    reply = json("reload " + with_route);
  });
  ASSERT_TRUE(has(reply["applied"], "pipeline")) << reply.dump();
  ASSERT_EQ(reply["summary"].size(), 1u) << reply.dump();
  EXPECT_EQ(reply["summary"][0]["section"], "pipeline");
  EXPECT_EQ(reply["summary"][0]["change"], "route: 2 routes → 3 (added 203.0.113.0/24)");
  EXPECT_TRUE(reply["restart_required"].empty()) << reply.dump();

  Json acc1 = settled_accounting();
  expect_exact(acc1);
  Json r1 = route_stage();
  const uint64_t no_route = r1["no_route"].get<uint64_t>() - r0["no_route"].get<uint64_t>();
  const uint64_t forwarded = r1["forwarded"].get<uint64_t>() - r0["forwarded"].get<uint64_t>();
  // Every frame was decided by the old table (dropped, no route) or the new one (forwarded,
  // and it arrived): none lost, none decided by anything in between.
  EXPECT_EQ(no_route + forwarded, kFlood);
  EXPECT_EQ(received, forwarded);
  EXPECT_EQ(
      port(acc1, "wan")["dropped"].get<uint64_t>() - port(acc0, "wan")["dropped"].get<uint64_t>(),
      no_route);
  EXPECT_EQ(r1["routes"], 3u);

  // Settled: all of a second flood arrives.
  constexpr uint64_t kCheck = 2000;
  EXPECT_EQ(flood(kNewPrefixHost, kCheck, 10000), kCheck);

  // An ACL rule denying the flood's port: nothing of it crosses, each frame counted by it.
  const std::string with_deny =
      variant("deny.yaml", {{kLastRoute, std::string(kLastRoute) + kNewRoute},
                            {"      - {name: no-telnet",
                             "      - {name: no-flood, action: deny, proto: udp, dst_port: " +
                                 std::to_string(kFloodPort) + "}\n      - {name: no-telnet"}});
  Json deny = json("reload " + with_deny);
  ASSERT_EQ(deny["summary"].size(), 1u) << deny.dump();
  EXPECT_EQ(deny["summary"][0]["change"], "acl: 1 rule → 2 (added no-flood)");
  Json acc2 = settled_accounting();
  Json r2 = route_stage();
  EXPECT_EQ(flood(kNewPrefixHost, kCheck, 10000), 0u);
  Json acc3 = settled_accounting();
  expect_exact(acc3);
  EXPECT_EQ(acl_packets("no-flood"), kCheck);
  EXPECT_EQ(
      port(acc3, "wan")["dropped"].get<uint64_t>() - port(acc2, "wan")["dropped"].get<uint64_t>(),
      kCheck);
  EXPECT_EQ(route_stage()["forwarded"], r2["forwarded"]) << "denied before the route stage";
  EXPECT_EQ(json("config pipeline")["pipeline"][0]["rules"][0]["name"], "no-flood");
}

TEST_F(PipelineReload, StructuralChangesAreRefusedAndTheOldPipelineKeepsForwarding) {
  const Json before = json("config pipeline");
  // A count stage added, and a route: the section is refused as a whole.
  const std::string with_stage =
      variant("stage.yaml", {{kLastRoute, std::string(kLastRoute) + kNewRoute},
                             {"  - stage: neighbour\n",
                              "  - stage: count\n    by: flow\n    fuse: true\n"
                              "  - stage: neighbour\n"}});
  Json reply = json("reload " + with_stage);
  EXPECT_FALSE(has(reply["applied"], "pipeline")) << reply.dump();
  ASSERT_EQ(reply["restart_required"].size(), 1u) << reply.dump();
  EXPECT_EQ(reply["restart_required"][0]["section"], "pipeline");
  EXPECT_EQ(reply["restart_required"][0]["reasons"][0],
            "stage added (count): stages and their scheduler queues are built at start; "
            "restart vecflowd to apply it");
  EXPECT_EQ(json("config pipeline"), before);
  EXPECT_EQ(route_stage()["routes"], 2u);
  EXPECT_TRUE(has(json("status")["config"]["restart_required"], "pipeline"));
  // The human reply names the section and why.
  Exec human = ctl("reload " + with_stage);
  EXPECT_EQ(human.rc, 0) << human.err;
  EXPECT_NE(human.out.find("stage added (count)"), std::string::npos) << human.out;

  // No count stage runs, so `flows` says how to get one.
  Exec flows = ctl("flows");
  EXPECT_EQ(flows.rc, 1);
  EXPECT_NE(flows.err.find("stage: count, by: flow"), std::string::npos) << flows.err;

  // Ports, cpu and scheduler are built at start: refused with their reasons.
  const std::string with_parts =
      variant("parts.yaml", {{"vector: {size: 64", "vector: {size: 32"},
                             {"  workers: [1]\n", "  workers: [1]\n  idle_sleep_max_us: 100\n"},
                             {"    mode: auto\n", "    mode: copy\n"}});
  Json parts = json("reload " + with_parts);
  std::vector<std::string> sections;
  for (const auto& r : parts["restart_required"]) {
    sections.push_back(r["section"]);
    EXPECT_NE(r["reasons"][0].get<std::string>().find("restart vecflowd to apply it"),
              std::string::npos)
        << r.dump();
  }
  std::sort(sections.begin(), sections.end());
  EXPECT_EQ(sections, (std::vector<std::string>{"cpu", "ports", "scheduler"})) << parts.dump();
  EXPECT_EQ(json("config scheduler")["scheduler"]["vector"]["size"], 64);

  // The old pipeline forwards as before: the demo's routes, not the refused one.
  Json acc0 = settled_accounting();
  EXPECT_EQ(flood("198.51.100.2", 2000, 10000), 2000u);
  EXPECT_EQ(flood(kNewPrefixHost, 500, 10000), 0u);
  expect_exact(settled_accounting());
}

}  // namespace
}  // namespace vecflow::test
