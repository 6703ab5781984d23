// Route and ACL tables replaced while an lcore runs traffic through them: accounting holds,
// and every packet was decided by the old or the new table, never by something in between
// (a half-updated table would, for instance, have no route for a moment). The sanitizer
// build turns a table freed too early into a use-after-free report.
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/acl/acl_stage.h"
#include "pipeline/route/route_stage.h"
#include "runtime/lcore.h"

using namespace vecflow;
using namespace vecflow::test;
using namespace std::chrono_literals;

namespace {

// Packets of class k enter on port k, so that the per-port outcome counters are per class.
constexpr uint16_t kClasses = 4;

// Routes A and B send the classes' destinations to ports 2 and 3 differently:
//   10.1.2.3: A -> p3 (10.1/16), B -> p3 (10/8)
//   10.2.2.3: A -> p2 (10/8),    B -> p2 (10.2/16)
//   10.3.3.3: A -> p2 (10/8),    B -> p3 (10/8)
std::vector<StaticRoute> routes_a() {
  return {route("10.0.0.0/8", "p2"), route("10.1.0.0/16", "p3")};
}
std::vector<StaticRoute> routes_b() {
  return {route("10.0.0.0/8", "p3"), route("10.2.0.0/16", "p2")};
}

AclConfig acl_denying(uint16_t low, uint16_t high) {
  AclConfig acl;
  AclRule r;
  r.name = "deny";
  r.action = AclAction::Deny;
  r.match.l4_proto = IPPROTO_UDP;
  r.match.dst_port = config::PortRange{low, high};
  acl.rules = {r};
  return acl;
}
// X denies UDP ports 1-100, Y 50-150. Class 0 (port 75) is denied by both, class 1 (25) by X
// only, class 2 (125) by Y only, class 3 (200) by neither.
AclConfig acl_x() {
  return acl_denying(1, 100);
}
AclConfig acl_y() {
  return acl_denying(50, 150);
}

struct ClassSpec {
  const char* dst;
  uint16_t dport;
};
constexpr ClassSpec kClassSpecs[kClasses] = {
    {"10.1.2.3", 75}, {"10.1.2.3", 25}, {"10.2.2.3", 125}, {"10.3.3.3", 200}};

// Counts where transmitted packets went, per class; written by the traffic lcore only.
class RecordingSinks final : public Sinks {
 public:
  void transmit(std::span<rte_mbuf*> p) noexcept override {
    for (rte_mbuf* m : p)
      out[m->port][meta(m).out_port].add();
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }
  void kernel(std::span<rte_mbuf*> p) noexcept override {
    unexpected.add(p.size());
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }
  void next(std::span<rte_mbuf*> p) noexcept override {
    unexpected.add(p.size());
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }
  void copies(std::span<rte_mbuf*> p) noexcept override {
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }
  Counter out[kClasses][kClasses];
  Counter unexpected;
};

class Traffic final : public Service {
 public:
  Traffic(Pipeline& p, OutcomeTable& o, std::vector<rte_mbuf*> templates)
      : Service("traffic"), worker_(p, o, 0), outcomes_(o), templates_(std::move(templates)) {}
  bool poll() noexcept override {
    rte_mbuf* burst[32];
    for (unsigned i = 0; i < 32; ++i) {
      burst[i] = rte_pktmbuf_copy(templates_[i % kClasses], test_pool(), 0, UINT32_MAX);
      if (burst[i] == nullptr) {
        rte_pktmbuf_free_bulk(burst, i);
        return false;
      }
      outcomes_.at(0, PortId{burst[i]->port}).rx_packets.add();
    }
    worker_.run_vector(0, burst, sinks);
    vectors.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  RecordingSinks sinks;
  std::atomic<uint64_t> vectors{0};

 private:
  PipelineWorker worker_;
  OutcomeTable& outcomes_;
  std::vector<rte_mbuf*> templates_;
};

}  // namespace

TEST(Replace, RoutesAndAclsChangeUnderTrafficWithoutAMixedDecision) {
  VECFLOW_REQUIRE_EAL();
  Harness h;
  h.ctx.ports.clear();
  for (uint16_t i = 0; i < kClasses; ++i)
    h.ctx.ports.push_back(PortInfo{fmt::format("p{}", i), MacAddress{}, ""});
  OutcomeTable outcomes(1, kClasses);
  RouteConfig rs;
  rs.routes = routes_a();
  ASSERT_TRUE(h.build({stage("acl", acl_x()), stage("route", rs, true)}));
  auto* acl = h.pipeline->find<AclStage>("acl");
  auto* route = h.pipeline->find<RouteStage>("route");

  std::vector<rte_mbuf*> templates;
  for (uint16_t c = 0; c < kClasses; ++c) {
    FrameSpec s;
    s.dst = kClassSpecs[c].dst;
    s.dport = kClassSpecs[c].dport;
    s.port = c;
    templates.push_back(make_frame(s));
  }
  auto traffic = std::make_shared<Traffic>(*h.pipeline, outcomes, templates);
  Lcore lcore(1, BackoffConfig{.busy_poll = true});
  lcore.attach_qsbr(h.qsbr.get(), 0);
  lcore.add_service(traffic);
  std::thread thread([&] { lcore.run(); });

  auto progress = [&](uint64_t n) {
    uint64_t start = traffic->vectors.load();
    auto end = std::chrono::steady_clock::now() + 10s;
    while (traffic->vectors.load() < start + n && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(50us);
    return traffic->vectors.load() >= start + n;
  };
  std::mt19937 rng(3);
  bool ok = progress(10);
  for (int i = 1; ok && i <= 200; ++i) {
    ok = bool(route->replace_routes(i % 2 ? routes_b() : routes_a()));
    if (ok && i % 3 == 0) ok = bool(acl->replace_rules((i / 3) % 2 ? acl_y() : acl_x()));
    if (ok && rng() % 4 == 0) ok = progress(1);
  }
  bool moved = progress(10);
  lcore.request_stop();
  thread.join();
  for (rte_mbuf* m : templates)
    rte_pktmbuf_free(m);
  ASSERT_TRUE(ok) << "a replacement failed or traffic stopped";
  ASSERT_TRUE(moved);

  const RecordingSinks& s = traffic->sinks;
  EXPECT_EQ(s.unexpected.load(), 0u);
  AccountingSnapshot total = outcomes.total_snapshot();
  uint64_t tx = 0;
  for (auto& row : s.out)
    for (auto& c : row)
      tx += c.load();
  total.tx = tx;
  EXPECT_EQ(total.unaccounted(), 0) << total.to_string();
  EXPECT_EQ(total.drops[size_t(DropReason::NO_ROUTE)], 0u) << "a table without its routes";
  EXPECT_EQ(total.dropped(), total.drops[size_t(DropReason::ACL_DENY)]);

  auto denied = [&](uint16_t c) {
    return outcomes.port_snapshot(PortId{c}).drops[size_t(DropReason::ACL_DENY)];
  };
  // Class 0: denied by X and Y alike.
  EXPECT_GT(denied(0), 0u);
  for (uint16_t p = 0; p < kClasses; ++p)
    EXPECT_EQ(s.out[0][p].load(), 0u);
  // Class 1: denied (X) or to p3 (Y; A and B agree); class 2: denied (Y) or to p2 (X).
  EXPECT_GT(denied(1), 0u);
  EXPECT_GT(s.out[1][3].load(), 0u);
  EXPECT_GT(denied(2), 0u);
  EXPECT_GT(s.out[2][2].load(), 0u);
  for (uint16_t p : {0, 1, 2})
    EXPECT_EQ(s.out[1][p].load(), 0u) << "class 1 to p" << p;
  for (uint16_t p : {0, 1, 3})
    EXPECT_EQ(s.out[2][p].load(), 0u) << "class 2 to p" << p;
  // Class 3: never denied; to p2 by A, p3 by B, and both tables were in use.
  EXPECT_EQ(denied(3), 0u);
  EXPECT_GT(s.out[3][2].load(), 0u);
  EXPECT_GT(s.out[3][3].load(), 0u);
  EXPECT_EQ(s.out[3][0].load() + s.out[3][1].load(), 0u);
}
