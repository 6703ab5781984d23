// trafgen send --engine xdp-live (the kernel's XDP live frames, tools/trafgen/xdp_live.h) out of
// one end of a veth pair, trafgen recv on the other: every frame sent arrives, each flow's
// sequence numbers without a gap or a step back, in as many flows as were sent, for UDP and
// TCP, IPv4 and IPv6, unpaced and paced.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io_fixtures.h"

using namespace vecflow;
using namespace vecflow::test;
using Json = nlohmann::json;

namespace {

struct Case {
  std::string name;
  std::string args;  // trafgen send's, beside --dev, --dst-mac and --count
  uint64_t count;
  uint32_t flows;
  double rate = 0;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class TrafgenLive : public testing::TestWithParam<Case> {};

TEST_P(TrafgenLive, EveryFrameArrivesInOrderPerFlow) {
  VECFLOW_REQUIRE_NETNS();
  const Case& c = GetParam();
  VethLab lab;
  ASSERT_TRUE(lab.ok());
  const std::string dir = fmt::format("/tmp/vf-trafgen-live-{}-{}", getpid(), c.name);
  const std::string trafgen = built_tool("trafgen");
  std::string mac = sh_output(
      fmt::format("ip netns exec {} cat /sys/class/net/{}/address", lab.ns(), VethLab::b));
  mac = mac.substr(0, 17);
  // A kernel may refuse live frames to BPF_PROG_RUN (EPERM on some 6.18.44 machines of ours):
  // one frame, before the receiver listens, says whether this one does.
  const std::string probe = sh_output(fmt::format(
      "ip netns exec {} {} send --engine xdp-live --dev {} --dst-mac {} --count 1 {} --json 2>&1",
      lab.ns(), trafgen, VethLab::a, mac, c.args));
  if (probe.find("live frames: Operation not permitted") != std::string::npos)
    GTEST_SKIP() << "this kernel refuses BPF_PROG_RUN with live frames: " << probe;
  std::filesystem::create_directories(dir);
  std::thread receiver([&] {
    lab.run(
        fmt::format("{} recv --dev {} --idle-exit 1000 --duration 60 --json > {}/recv.json "
                    "2> {}/recv.err",
                    trafgen, VethLab::b, dir, dir));
  });
  // The receiver says when its socket is bound; frames sent before would not be counted.
  for (int i = 0; i < 500 && slurp(dir + "/recv.err").find("receiving on") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string out = sh_output(fmt::format(
      "ip netns exec {} {} send --engine xdp-live --dev {} --dst-mac {} --count {} --flows {} {} "
      "--json",
      lab.ns(), trafgen, VethLab::a, mac, c.count, c.flows, c.args));
  receiver.join();
  Json rx = Json::parse(slurp(dir + "/recv.json"), nullptr, false);
  std::filesystem::remove_all(dir);
  Json tx = Json::parse(out, nullptr, false);
  ASSERT_FALSE(tx.is_discarded()) << "trafgen send: " << out;
  ASSERT_FALSE(rx.is_discarded()) << "trafgen recv printed no result";

  EXPECT_EQ(tx["sent"].get<uint64_t>(), c.count) << tx.dump();
  EXPECT_EQ(tx["dev_tx_dropped"].get<uint64_t>(), 0u) << tx.dump();
  // lo had no XDP program of its own, so the program was held in the dispatcher.
  EXPECT_TRUE(tx["held_in_dispatcher"].get<bool>()) << tx.dump();
  EXPECT_EQ(rx["received"].get<uint64_t>(), c.count) << rx.dump();
  EXPECT_EQ(rx["flows"].get<uint32_t>(), c.flows) << rx.dump();
  EXPECT_EQ(rx["lost"].get<uint64_t>(), 0u) << rx.dump();
  EXPECT_EQ(rx["reordered"].get<uint64_t>(), 0u) << rx.dump();
  EXPECT_EQ(rx["foreign"].get<uint64_t>(), 0u) << rx.dump();
  EXPECT_EQ(rx["socket_drops"].get<uint64_t>(), 0u) << rx.dump();
  // Stamped with CLOCK_REALTIME as the receiver reads it: latencies are positive and short
  // (under a second, on a loaded machine).
  EXPECT_EQ(rx["latency"]["clock_behind"].get<uint64_t>(), 0u) << rx.dump();
  EXPECT_LT(rx["latency"]["max_ns"].get<uint64_t>(), 1'000'000'000u) << rx.dump();
  if (c.rate > 0) {
    // Paced: never ahead of the schedule (by more than a run's --burst-us window).
    EXPECT_LE(tx["pps"].get<double>(), c.rate * 1.01) << tx.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Veth, TrafgenLive,
    testing::Values(Case{"udp4", "--dst 198.51.100.2 --src 192.0.2.2 --size 60", 200000, 1024},
                    Case{"tcp6", "--dst 2001:db8:1::2 --src 2001:db8::2 --proto tcp --size 1500",
                         50000, 7},
                    Case{"udp4_paced", "--dst 198.51.100.2 --src 192.0.2.2 --size 60 --rate 100000",
                         20000, 3, 100000}),
    [](const testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
