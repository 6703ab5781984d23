// The packet trace: the tracer marks as many packets as asked that pass the filter and keeps
// their steps apart from an earlier trace's; the steps read as words; `trace-add` installs
// and removes the hooks through the tap and refuses what it cannot do without touching them.
#include <gtest/gtest.h>

#include <rte_eventdev.h>
#include <rte_mbuf.h>

#include <chrono>

#include "../pipeline/frames.h"
#include "control/capture.h"
#include "control/trace.h"
#include "core/drop_reason.h"
#include "server_fixture.h"
#include "support/eal_env.h"

namespace vecflow::control {
namespace {

using namespace std::chrono_literals;
using vecflow::test::FrameSpec;
using vecflow::test::make_frame;

struct Burst {
  std::vector<rte_mbuf*> pkts;
  ~Burst() {
    for (rte_mbuf* m : pkts)
      rte_pktmbuf_free(m);
  }
};

FrameSpec udp(uint16_t dport) {
  FrameSpec f;
  f.dport = dport;
  return f;
}

FrameSpec tcp(uint16_t dport) {
  FrameSpec f;
  f.proto = IPPROTO_TCP;
  f.dport = dport;
  return f;
}

TEST(Tracer, MarksAsManyAsAskedThatPassTheFilter) {
  VECFLOW_REQUIRE_EAL();
  auto filter = compile_capture_filter("udp dst port 2000", 65535);
  ASSERT_TRUE(filter) << filter.error().message;
  trace::Tracer& t = trace::tracer();
  t.arm(3, *filter);
  Burst b;
  for (const FrameSpec& f : {tcp(2000), udp(2000), udp(53), udp(2000), udp(2000), udp(2000)})
    b.pkts.push_back(make_frame(f));
  EXPECT_TRUE(t.mark(b.pkts, 1, 2));
  std::vector<bool> marked;
  for (rte_mbuf* m : b.pkts)
    marked.push_back(trace::marked(m));
  EXPECT_EQ(marked, (std::vector<bool>{false, true, false, true, true, false}));
  EXPECT_EQ(t.taken(), 3u);
  EXPECT_FALSE(t.mark(b.pkts, 1, 2)) << "all three taken";

  const auto packets = t.read();
  ASSERT_EQ(packets.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(packets[i].number, i + 1);
    ASSERT_EQ(packets[i].steps.size(), 1u);
    const trace::Record& r = packets[i].steps[0];
    EXPECT_EQ(r.step, trace::Step::Rx);
    EXPECT_EQ(r.port, 1);
    EXPECT_EQ(r.queue, 2);
    EXPECT_EQ(summarize_frame(r.data.data(), r.bytes), "IPv4 UDP 10.0.0.1:1000 > 10.0.0.2:2000");
  }
  t.stop_marking();
  rte_bpf_destroy(*filter);
}

TEST(Tracer, ANewTraceDoesNotReadTheStepsOfTheLastOnesPackets) {
  VECFLOW_REQUIRE_EAL();
  trace::Tracer& t = trace::tracer();
  t.arm(1, nullptr);
  Burst b;
  b.pkts = {make_frame(udp(1)), make_frame(udp(2))};
  ASSERT_TRUE(t.mark({b.pkts.data(), 1}, 0, 0));
  t.arm(1, nullptr);
  // The first packet, still in flight, reaches a stage: its step belongs to the old trace.
  trace::Record r;
  r.step = trace::Step::Stage;
  t.add(b.pkts[0], r);
  EXPECT_TRUE(t.read().empty());
  ASSERT_TRUE(t.mark({b.pkts.data() + 1, 1}, 0, 0));
  const auto packets = t.read();
  ASSERT_EQ(packets.size(), 1u);
  ASSERT_EQ(packets[0].steps.size(), 1u);
  EXPECT_EQ(summarize_frame(packets[0].steps[0].data.data(), packets[0].steps[0].bytes),
            "IPv4 UDP 10.0.0.1:1000 > 10.0.0.2:2");
  t.stop_marking();
}

TEST(TraceWords, FramesAndSteps) {
  VECFLOW_REQUIRE_EAL();
  auto summary = [](const FrameSpec& f) {
    rte_mbuf* m = make_frame(f);
    std::string s = summarize_frame(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m));
    rte_pktmbuf_free(m);
    return s;
  };
  FrameSpec v6 = tcp(443);
  v6.version = 6;
  v6.src = "2001:db8::1";
  v6.dst = "2001:db8::2";
  EXPECT_EQ(summary(v6), "IPv6 TCP [2001:db8::1]:1000 > [2001:db8::2]:443");
  FrameSpec tagged = udp(53);
  tagged.vlan = 100;
  EXPECT_EQ(summary(tagged), "vlan 100 IPv4 UDP 10.0.0.1:1000 > 10.0.0.2:53");
  FrameSpec icmp;
  icmp.proto = IPPROTO_ICMP;
  EXPECT_NE(summary(icmp).find("IPv4 ICMP 10.0.0.1 > 10.0.0.2"), std::string::npos);
  rte_mbuf* arp = vecflow::test::make_arp(0);
  EXPECT_TRUE(summarize_frame(rte_pktmbuf_mtod(arp, const uint8_t*), rte_pktmbuf_data_len(arp))
                  .starts_with("ARP "));
  rte_pktmbuf_free(arp);

  TraceNames names;
  names.ports = {"wan", "lan"};
  names.stages = {"filter", "route"};
  names.queues = {"filter+route"};
  names.nexthop = [](uint32_t id) { return id == 7 ? std::string("192.0.2.1") : std::string(); };
  trace::Record r;
  r.step = trace::Step::Stage;
  r.index = 1;
  r.verdict = static_cast<uint8_t>(Verdict::Continue);
  r.port = 1;
  r.value = 7;
  EXPECT_EQ(describe_step(r, names), "continue out lan via 192.0.2.1");
  r.verdict = static_cast<uint8_t>(Verdict::Drop);
  r.reason = static_cast<uint16_t>(DropReason::ACL_DENY);
  const char words[] = "deny block-ssh";
  std::copy(words, words + sizeof(words) - 1, r.data.begin());
  r.bytes = sizeof(words) - 1;
  EXPECT_EQ(describe_step(r, names), "drop (acl_deny): deny block-ssh");
  trace::Record d;
  d.step = trace::Step::Dequeue;
  d.queue = 0;
  d.index = 5;
  d.value = 64;
  d.extra = RTE_SCHED_TYPE_ATOMIC;
  EXPECT_EQ(describe_step(d, names), "queue 0 (filter+route) atomic, flow 5, event of 64 packets");
  trace::Record x;
  x.step = trace::Step::TxDrop;
  x.port = 0;
  x.verdict = static_cast<uint8_t>(Verdict::Transmit);
  x.reason = static_cast<uint16_t>(DropReason::TX_FULL);
  EXPECT_EQ(describe_step(x, names), "dropped at wan (tx_full)");
}

// The hook points' side as a test double: which hooks are in place.
class TestTraceTap final : public TraceTap {
 public:
  Result<void> attach_trace(const std::vector<PortId>& p) override {
    ports = p;
    rx = tx = true;
    return {};
  }
  void detach_trace_rx() noexcept override { rx = false; }
  void detach_trace() noexcept override { rx = tx = false; }
  std::vector<PortId> ports;
  bool rx = false, tx = false;
};

class TraceCommandTest : public test::ServerFixture {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_EAL();
    ServerFixture::SetUp();
    TraceNames names;
    names.ports = {"wan", "lan"};
    names.stages = {"route"};
    names.queues = {"route"};
    traces_ = std::make_unique<TraceManager>(*server_, tap_, std::move(names));
    traces_->register_commands(registry_);
  }
  void TearDown() override {
    traces_.reset();
    ServerFixture::TearDown();
  }

  TestTraceTap tap_;
  std::unique_ptr<TraceManager> traces_;
};

TEST_F(TraceCommandTest, HooksGoInForATraceAndComeOutWhenItsPacketsLeft) {
  Json r = call("trace-add", {{"count", 1}, {"port", "lan"}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["trace"]["state"], "armed");
  EXPECT_EQ(tap_.ports, std::vector<PortId>{PortId{1}});
  EXPECT_TRUE(tap_.rx && tap_.tx);

  // The data path takes one packet: the rx hook goes at the next check; the packet is still
  // in flight, so the tx hook stays until it left.
  Burst b;
  b.pkts = {make_frame(udp(9))};
  ASSERT_TRUE(trace::tracer().mark(b.pkts, 1, 0));
  pump(60ms);
  EXPECT_FALSE(tap_.rx);
  EXPECT_TRUE(tap_.tx);
  EXPECT_EQ(call("trace", Json::object())["result"]["trace"]["state"], "following");
  trace::Record tx;
  tx.step = trace::Step::Tx;
  tx.port = 0;
  trace::tracer().add(b.pkts[0], tx);
  pump(60ms);
  EXPECT_FALSE(tap_.tx);
  Json shown = call("trace", Json::object());
  EXPECT_EQ(shown["result"]["trace"]["state"], "idle");
  EXPECT_EQ(shown["result"]["trace"]["finished"], 1);
  ASSERT_EQ(shown["result"]["steps"].size(), 2u);
  EXPECT_EQ(shown["result"]["steps"][0]["step"], "rx");
  EXPECT_EQ(shown["result"]["steps"][1]["detail"], "handed to wan queue 0");

  ASSERT_TRUE(call("trace-add", {{"count", 5}})["ok"].get<bool>());
  EXPECT_EQ(tap_.ports, (std::vector<PortId>{PortId{0}, PortId{1}})) << "no port: every port";
  Json cleared = call("trace-clear", Json::object());
  ASSERT_TRUE(cleared["ok"].get<bool>()) << cleared.dump();
  EXPECT_FALSE(tap_.rx || tap_.tx);
  EXPECT_TRUE(cleared["result"]["steps"].empty());
}

TEST_F(TraceCommandTest, RefusesBadRequestsWithoutTouchingTheHooks) {
  auto message = [&](Json args) {
    Json r = call("trace-add", args);
    return r["ok"].get<bool>() ? std::string("ok") : r["error"]["message"].get<std::string>();
  };
  EXPECT_NE(message({{"count", 1}, {"port", "dmz"}}).find("no port named 'dmz'"),
            std::string::npos);
  EXPECT_NE(message({{"count", 1}, {"filter", "udp port banana"}}).find("filter"),
            std::string::npos);
  EXPECT_NE(message({{"count", 0}}).find("count"), std::string::npos);
  EXPECT_NE(message({{"count", 1001}}).find("count"), std::string::npos);
  EXPECT_NE(message(Json::object()).find("count"), std::string::npos);
  EXPECT_FALSE(tap_.rx || tap_.tx);
  EXPECT_EQ(call("trace-add", {{"count", 1}, {"action", "start"}})["error"]["code"],
            "bad_arguments");
}

}  // namespace
}  // namespace vecflow::control
