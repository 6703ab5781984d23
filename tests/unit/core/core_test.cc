#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "core/accounting.h"
#include "core/burst.h"
#include "core/drop_reason.h"
#include "core/flow.h"
#include "core/log.h"
#include "core/net.h"
#include "core/packet.h"
#include "core/wait_histogram.h"
#include "support/eal_env.h"
#include "support/lab.h"
#include "vecflow/xdp_meta.h"

using namespace vecflow;

TEST(DropReason, NamesRoundTripAndAreUnique) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kDropReasonCount; ++i) {
    auto r = static_cast<DropReason>(i);
    auto name = drop_reason_name(r);
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    EXPECT_EQ(drop_reason_from_name(name), r);
    EXPECT_FALSE(drop_reason_text(r).empty());
  }
  EXPECT_EQ(drop_reason_name(DropReason::IPV4_BAD_IHL), "ipv4_bad_ihl");
  EXPECT_FALSE(drop_reason_from_name("no_such_reason"));
}

// docs/drop-reasons.md's table of drop reasons is the enum's, in order, with the same
// meanings: the documentation cannot drift from the list the counters use.
TEST(DropReason, DocsTableIsTheList) {
  std::ifstream in(test::source_path("docs/drop-reasons.md"));
  std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- drop-reasons:", end = "<!-- end drop-reasons -->";
  size_t b = readme.find(begin);
  ASSERT_NE(b, std::string::npos) << "docs/drop-reasons.md has no drop-reasons block";
  b = readme.find('\n', b) + 1;
  size_t e = readme.find(end, b);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(readme.substr(b, e - b), drop_reasons_markdown())
      << "docs/drop-reasons.md's drop-reason table is stale: replace it with the output of "
         "`vecflowd --list-drop-reasons`";
}

FlowKey v4_key(uint32_t src, uint32_t dst, uint16_t sp, uint16_t dp) {
  FlowKey k{};
  k.src[0] = src;
  k.dst[0] = dst;
  k.src_port = sp;
  k.dst_port = dp;
  k.l4_proto = 17;
  k.ip_version = 4;
  return k;
}

TEST(FlowHash, SymmetricHashIgnoresDirection) {
  auto fwd = v4_key(0x0a000001, 0x0a000002, 1234, 80);
  auto rev = v4_key(0x0a000002, 0x0a000001, 80, 1234);
  EXPECT_EQ(flow_hash(fwd, true), flow_hash(rev, true));
  EXPECT_NE(flow_hash(fwd, false), flow_hash(rev, false));
}

TEST(FlowHash, SpreadsFlowsEvenly) {
  // 64k flows into 16 buckets: each bucket within 10% of the mean.
  constexpr int kBuckets = 16;
  int counts[kBuckets] = {};
  for (uint32_t i = 0; i < 65536; ++i) {
    auto k =
        v4_key(0x0a000000 + (i >> 8), 0xc0000201, static_cast<uint16_t>(1024 + (i & 0xff)), 53);
    uint32_t h = flow_hash(k, false);
    EXPECT_NE(h, 0u);
    ++counts[h % kBuckets];
  }
  for (int c : counts)
    EXPECT_NEAR(c, 65536 / kBuckets, 65536 / kBuckets / 10);
}

TEST(Net, ParsesPrefixesAndRejectsHostBits) {
  auto p = parse_ip_prefix("192.0.2.0/24");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->contains(*parse_ip_address("192.0.2.77")));
  EXPECT_FALSE(p->contains(*parse_ip_address("192.0.3.1")));
  EXPECT_FALSE(p->contains(*parse_ip_address("::1")));
  std::string why;
  EXPECT_FALSE(parse_ip_prefix("192.0.2.1/24", &why));
  EXPECT_NE(why.find("192.0.2.0/24"), std::string::npos);
  auto host = parse_ip_prefix("2001:db8::1");
  ASSERT_TRUE(host);
  EXPECT_EQ(host->length, 128);
  EXPECT_TRUE(parse_ip_prefix("0.0.0.0/0")->contains(*parse_ip_address("8.8.8.8")));
  EXPECT_FALSE(parse_ip_prefix("10.0.0.0/33"));
  EXPECT_FALSE(parse_ip_prefix("10.0.0.0/"));
  auto mac = parse_mac_address("02:00:5e:10:00:ff");
  ASSERT_TRUE(mac);
  EXPECT_EQ(mac->to_string(), "02:00:5e:10:00:ff");
  EXPECT_FALSE(parse_mac_address("02:00:5e:10:00"));
  EXPECT_FALSE(parse_mac_address("02:00:5e:10:00:zz"));
}

TEST(Accounting, SnapshotBalancesPerPortAndInTotal) {
  OutcomeTable table(2, 3);
  PortId p0{0}, p1{1};
  table.at(0, p0).rx_packets.add(10);
  table.at(0, p0).tx_packets.add(6);
  table.at(1, p0).kernel_packets.add(1);
  table.at(1, p0).drops.add(DropReason::NO_ROUTE, 3);
  table.at(1, p1).rx_packets.add(5);
  table.at(0, p1).tx_packets.add(4);
  auto s0 = table.port_snapshot(p0);
  EXPECT_EQ(s0.unaccounted(), 0) << s0.to_string();
  auto s1 = table.port_snapshot(p1);
  EXPECT_EQ(s1.unaccounted(), 1) << s1.to_string();
  auto total = table.total_snapshot();
  EXPECT_EQ(total.rx, 15u);
  EXPECT_EQ(total.drops[static_cast<size_t>(DropReason::NO_ROUTE)], 3u);
  EXPECT_EQ(s0.to_string(), "rx=10 tx=6 to_kernel=1 drops={no_route:3}");
}

TEST(Burst, IsPlainDataWithFixedCapacity) {
  Burst b;
  b.clear();
  for (uint16_t i = 0; i < kMaxBurst; ++i)
    b.push(reinterpret_cast<rte_mbuf*>(uintptr_t{i} + 1));
  EXPECT_TRUE(b.full());
  EXPECT_EQ(b.span().size(), kMaxBurst);
}

TEST(PacketMeta, LivesInTheMbufAndResets) {
  VECFLOW_REQUIRE_EAL();
  rte_mempool* pool = rte_pktmbuf_pool_create("meta_test", 64, 0, 0, 2048, SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr);
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  ASSERT_NE(m, nullptr);
  reset_meta(m);
  EXPECT_EQ(meta(m).verdict, Verdict::Continue);
  EXPECT_EQ(meta(m).out_port, kNoPort);
  set_drop(m, DropReason::ACL_DENY);
  EXPECT_EQ(meta(m).verdict, Verdict::Drop);
  EXPECT_EQ(static_cast<DropReason>(meta(m).drop_reason), DropReason::ACL_DENY);
  set_transmit(m, PortId{3});
  EXPECT_EQ(meta(m).out_port, 3);
  // The field sits inside the mbuf's dynamic area, clear of the packet data.
  auto* field = reinterpret_cast<char*>(&meta(m));
  EXPECT_GT(field, reinterpret_cast<char*>(m));
  EXPECT_LT(field + sizeof(PacketMeta), reinterpret_cast<char*>(m) + sizeof(rte_mbuf));
  rte_pktmbuf_free(m);
  rte_mempool_free(pool);
}

TEST(XdpMeta, LayoutIsStable) {
  // The XDP program and user space share this struct; bpf_xdp_adjust_meta needs a size that
  // is a multiple of 4.
  EXPECT_EQ(sizeof(vf_xdp_meta) % 4, 0u);
  EXPECT_EQ(sizeof(vf_xdp_meta), 24u);
  EXPECT_EQ(offsetof(vf_xdp_meta, magic), sizeof(vf_xdp_meta) - 2);
}

namespace vecflow {
namespace {

// A condition found every 200 ms is logged at 0 s, 1 s, 3 s, 7 s ...; each line after the
// first knows how many were held back; a cleared condition is logged again at once.
TEST(LogRepeating, BacksOffAndCountsWhatItHeldBack) {
  constexpr uint64_t kMs = 1'000'000;
  log::Repeating r;
  std::vector<uint64_t> logged_at;
  std::vector<uint64_t> held;
  for (uint64_t t = 0; t <= 8000; t += 200) {
    if (r.report(t * kMs)) {
      logged_at.push_back(t);
      held.push_back(r.suppressed());
    }
  }
  EXPECT_EQ(logged_at, (std::vector<uint64_t>{0, 1000, 3000, 7000}));
  EXPECT_EQ(held, (std::vector<uint64_t>{0, 4, 9, 19}));
  EXPECT_EQ(r.count(), 41u);
  EXPECT_TRUE(r.clear());
  EXPECT_FALSE(r.clear());
  EXPECT_TRUE(r.report(8200 * kMs));
  EXPECT_EQ(r.suppressed(), 0u);
}

TEST(LogRepeating, IntervalStopsGrowingAtItsCap) {
  log::Repeating r;
  uint64_t t = 0, last = 0, gap = 0;
  const uint64_t step = log::Repeating::kFirstIntervalNs / 4;
  for (int i = 0; i < 40000; ++i, t += step) {
    if (r.report(t)) {
      gap = t - last;
      last = t;
    }
  }
  EXPECT_EQ(gap, log::Repeating::kMaxIntervalNs);
}

// Every value falls in a bucket whose bound is at or above it and at most 25 % above it, and
// buckets are in order: the quantiles read from them are never below the truth, never far above.
TEST(WaitHistogram, BucketBoundsHoldTheirValuesWithin25Percent) {
  unsigned last = 0;
  for (uint64_t v = 0; v < (uint64_t{1} << 24); v = v < 64 ? v + 1 : v + v / 7) {
    const unsigned i = WaitHistogram::index(v);
    EXPECT_GE(i, last) << v;
    last = i;
    EXPECT_GE(WaitHistogram::upper_bound(i), v);
    if (v >= 4) {
      EXPECT_LE(WaitHistogram::upper_bound(i), v + v / 4) << v;
    }
    if (i > 0) {
      EXPECT_LT(WaitHistogram::upper_bound(i - 1), v) << v;
    }
  }
  EXPECT_EQ(WaitHistogram::index(UINT64_MAX), WaitHistogram::kBuckets - 1);
}

TEST(WaitHistogram, QuantilesMeanAndCountsAtABound) {
  WaitHistogram h;
  EXPECT_EQ(h.quantile_cycles(0.99), 0u);
  h.add(1000, 98);    // 98 things waited 1000 cycles
  h.add(100'000, 2);  // and two waited 100 000
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.sum_cycles(), 98'000u + 200'000u);
  const uint64_t p50 = h.quantile_cycles(0.5);
  EXPECT_GE(p50, 1000u);
  EXPECT_LE(p50, 1250u);
  const uint64_t p99 = h.quantile_cycles(0.99);
  EXPECT_GE(p99, 100'000u);
  EXPECT_LE(p99, 125'000u);
  EXPECT_EQ(h.at_most(999), 0u);
  EXPECT_EQ(h.at_most(WaitHistogram::upper_bound(WaitHistogram::index(1000))), 98u);
  EXPECT_EQ(h.at_most(UINT64_MAX), 100u);
}

}  // namespace
}  // namespace vecflow
