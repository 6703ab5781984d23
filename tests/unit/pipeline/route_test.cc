// The route stage: lookups against a plain reference longest match (100 000 prefixes, a
// million addresses, IPv4 and IPv6), TTL handling with incremental checksums, ICMP errors,
// ECMP, and what goes to the kernel or is dropped.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include <gtest/gtest.h>
#include <rte_icmp.h>
#include <rte_ip.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/ip_util.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/packet_view.h"
#include "pipeline/route_stage.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

class Route : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

IpPrefix masked(IpAddress a, unsigned len) {
  unsigned max = a.version == 4 ? 32 : 128;
  for (unsigned bit = len; bit < max; ++bit)
    a.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  return IpPrefix{a, static_cast<uint8_t>(len)};
}

IpAddress random_addr(std::mt19937_64& rng, uint8_t version) {
  IpAddress a;
  a.version = version;
  for (unsigned i = 0; i < (version == 4 ? 4u : 16u); ++i)
    a.bytes[i] = static_cast<uint8_t>(rng());
  return a;
}

// An address inside `p` with random host bits.
IpAddress inside(std::mt19937_64& rng, const IpPrefix& p) {
  IpAddress a = random_addr(rng, p.addr.version);
  for (unsigned bit = 0; bit < p.length; ++bit) {
    uint8_t m = static_cast<uint8_t>(0x80u >> (bit % 8));
    a.bytes[bit / 8] = static_cast<uint8_t>((a.bytes[bit / 8] & ~m) | (p.addr.bytes[bit / 8] & m));
  }
  return a;
}

// The plain reference: one exact-match set per prefix length, searched from the longest.
class ReferenceLpm {
 public:
  ReferenceLpm() {
    for (unsigned len = 0; len <= 128; ++len) {
      IpAddress ones;
      ones.version = 6;
      ones.bytes.fill(0xff);
      masks_[len] = words(masked(ones, len).addr);
    }
  }
  void add(const IpPrefix& p, size_t route) {
    by_len_[p.length].emplace(words(p.addr), route);
    lengths_.insert(p.length);
  }
  // Index of the longest matching route, or -1.
  long find(const IpAddress& a) const {
    const Key k = words(a);
    for (auto it = lengths_.rbegin(); it != lengths_.rend(); ++it) {
      const Key& m = masks_[*it];
      auto hit = by_len_[*it].find(Key{k.first & m.first, k.second & m.second});
      if (hit != by_len_[*it].end()) return static_cast<long>(hit->second);
    }
    return -1;
  }

 private:
  using Key = std::pair<uint64_t, uint64_t>;
  struct Hash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.first * 0x9e3779b97f4a7c15ull ^ k.second);
    }
  };
  static Key words(const IpAddress& a) {
    Key k;
    std::memcpy(&k.first, a.bytes.data(), 8);
    std::memcpy(&k.second, a.bytes.data() + 8, 8);
    return k;
  }
  std::array<Key, 129> masks_;
  std::array<std::unordered_map<Key, size_t, Hash>, 129> by_len_;
  std::set<unsigned> lengths_;
};

// Every route gets its own pair of gateways (ECMP), so every route has its own leaf and a
// lookup that lands on the wrong route cannot return the right answer by chance.
std::vector<RouteEntry> with_unique_leaves(const std::vector<IpPrefix>& prefixes, uint8_t version) {
  size_t gateways = 2;
  while (gateways * (gateways - 1) < prefixes.size())
    ++gateways;
  std::vector<RouteEntry> routes;
  routes.reserve(prefixes.size());
  for (size_t i = 0; i < prefixes.size(); ++i) {
    config::Route r;
    r.prefix = prefixes[i];
    size_t a = i / (gateways - 1);
    size_t b = i % (gateways - 1);
    if (b >= a) ++b;
    for (size_t g : {a, b}) {
      IpAddress via;
      via.version = version;
      if (version == 4) {
        via = address(fmt::format("100.64.{}.{}", g / 250, 1 + g % 250));
      } else {
        via = address(fmt::format("fd00::{:x}", g + 1));
      }
      r.nexthops.push_back(config::NextHop{via, "lan"});
    }
    routes.push_back(RouteEntry{r, RouteSource::Config});
  }
  return routes;
}

std::vector<PortInfo> ports() {
  return {PortInfo{"wan", kWanMac, ""}, PortInfo{"lan", kLanMac, ""}};
}

void compare_with_reference(const std::vector<IpPrefix>& prefixes,
                            const std::vector<IpAddress>& addrs, uint8_t version) {
  auto neighbours = NeighbourTable::create();
  ASSERT_TRUE(neighbours);
  auto table = RouteTable::build(with_unique_leaves(prefixes, version), ports(), **neighbours);
  ASSERT_TRUE(table) << table.error().message;
  ASSERT_EQ((*table)->leaf_count(), prefixes.size() + 1);
  ReferenceLpm ref;
  for (size_t i = 0; i < prefixes.size(); ++i)
    ref.add(prefixes[i], i);

  // The bulk path the stage uses, in batches.
  constexpr size_t kBatch = 64;
  size_t mismatches = 0, matched = 0;
  uint32_t ip4[kBatch];
  uint8_t ip6[kBatch][16];
  uint64_t leaves[kBatch];
  for (size_t base = 0; base < addrs.size(); base += kBatch) {
    size_t n = std::min(kBatch, addrs.size() - base);
    for (size_t i = 0; i < n; ++i) {
      if (version == 4) {
        ip4[i] = addrs[base + i].v4_host();
      } else {
        std::memcpy(ip6[i], addrs[base + i].bytes.data(), 16);
      }
    }
    if (version == 4) {
      (*table)->lookup4(ip4, leaves, static_cast<unsigned>(n));
    } else {
      (*table)->lookup6(ip6, leaves, static_cast<unsigned>(n));
    }
    for (size_t i = 0; i < n; ++i) {
      long r = ref.find(addrs[base + i]);
      uint64_t expect = r < 0 ? RouteTable::kNoRoute : (*table)->leaf_of(static_cast<size_t>(r));
      matched += r >= 0;
      if (leaves[i] != expect && ++mismatches <= 5) {
        ADD_FAILURE() << addrs[base + i].to_string() << ": FIB leaf " << leaves[i]
                      << ", reference leaf " << expect << " (route "
                      << (r < 0 ? std::string("none") : prefixes[size_t(r)].to_string()) << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
  // Both outcomes were exercised in quantity.
  EXPECT_GT(matched, addrs.size() / 3);
  EXPECT_LT(matched, addrs.size());
}

constexpr size_t kPrefixes = 100'000;
constexpr size_t kAddresses = 1'000'000;

}  // namespace

TEST_F(Route, Ipv4LookupMatchesReferenceLongestMatch) {
  std::mt19937_64 rng(4);
  std::set<std::pair<uint32_t, unsigned>> seen;
  std::vector<IpPrefix> prefixes;
  // A table shaped like the Internet's: mostly /16../24, some shorter, some longer (down to
  // host routes, which exercise DIR-24-8's second level). No default route, and short
  // prefixes few enough that many addresses miss.
  while (prefixes.size() < kPrefixes) {
    unsigned r = rng() % 100;
    unsigned len = r < 2 ? 8 + rng() % 8 : r < 80 ? 16 + rng() % 9 : 25 + rng() % 8;
    IpPrefix p = masked(random_addr(rng, 4), len);
    if (seen.emplace(p.addr.v4_host(), len).second) prefixes.push_back(p);
  }
  std::vector<IpAddress> addrs;
  addrs.reserve(kAddresses);
  for (size_t i = 0; i < kAddresses; ++i) {
    addrs.push_back(i % 2 ? random_addr(rng, 4) : inside(rng, prefixes[rng() % prefixes.size()]));
  }
  compare_with_reference(prefixes, addrs, 4);
}

TEST_F(Route, Ipv6LookupMatchesReferenceLongestMatch) {
  std::mt19937_64 rng(6);
  // Allocations under shared roots, like the IPv6 table: roots /16../32, routes under them
  // mostly to /48, some to /64, some longer up to host routes; a few short prefixes (few
  // enough that many addresses miss).
  std::vector<IpPrefix> roots;
  for (int i = 0; i < 1000; ++i)
    roots.push_back(masked(random_addr(rng, 6), 16 + rng() % 17));
  std::set<std::pair<std::array<uint8_t, 16>, unsigned>> seen;
  std::vector<IpPrefix> prefixes;
  while (prefixes.size() < kPrefixes) {
    unsigned r = rng() % 100;
    IpPrefix p;
    if (rng() % 1000 < 2) {
      p = masked(random_addr(rng, 6), 10 + rng() % 6);
    } else {
      const IpPrefix& root = roots[rng() % roots.size()];
      unsigned len = r < 72   ? root.length + rng() % (49 - root.length)
                     : r < 92 ? 49 + rng() % 16
                              : 65 + rng() % 64;
      p = masked(inside(rng, root), len);
    }
    if (seen.emplace(p.addr.bytes, p.length).second) prefixes.push_back(p);
  }
  std::vector<IpAddress> addrs;
  addrs.reserve(kAddresses);
  for (size_t i = 0; i < kAddresses; ++i) {
    if (i % 4 == 0) {
      addrs.push_back(random_addr(rng, 6));
    } else if (i % 4 == 1) {
      addrs.push_back(inside(rng, roots[rng() % roots.size()]));
    } else {
      addrs.push_back(inside(rng, prefixes[rng() % prefixes.size()]));
    }
  }
  compare_with_reference(prefixes, addrs, 6);
}

TEST(Ipv4Checksum, IncrementalTtlDecrementEqualsFullRecomputation) {
  std::mt19937_64 rng(11);
  uint8_t buf[60];
  for (int i = 0; i < 200'000; ++i) {
    auto* h = reinterpret_cast<rte_ipv4_hdr*>(buf);
    for (auto& b : buf)
      b = static_cast<uint8_t>(rng());
    h->version_ihl = static_cast<uint8_t>(0x40 | (5 + rng() % 11));  // with options, too
    h->time_to_live = static_cast<uint8_t>(2 + rng() % 254);
    h->hdr_checksum = 0;
    h->hdr_checksum = rte_ipv4_cksum(h);
    ipv4_decrement_ttl(h);
    uint16_t incremental = h->hdr_checksum;
    h->hdr_checksum = 0;
    ASSERT_EQ(incremental, rte_ipv4_cksum(h)) << "iteration " << i;
  }
  // Every TTL of one header, down to 1.
  auto* h = reinterpret_cast<rte_ipv4_hdr*>(buf);
  h->version_ihl = RTE_IPV4_VHL_DEF;
  h->time_to_live = 255;
  h->hdr_checksum = 0;
  h->hdr_checksum = rte_ipv4_cksum(h);
  while (h->time_to_live > 1) {
    ipv4_decrement_ttl(h);
    uint16_t incremental = h->hdr_checksum;
    h->hdr_checksum = 0;
    ASSERT_EQ(incremental, rte_ipv4_cksum(h)) << "ttl " << int(h->time_to_live);
    h->hdr_checksum = incremental;
  }
}

TEST(Ipv4Checksum, ResultThatSumsToZeroStaysCanonical) {
  // A header whose checksum after the decrement must be 0x0000 (its other words sum to
  // 0xffff): the incremental update must not produce the other zero, 0xffff.
  uint8_t buf[20] = {};
  auto* h = reinterpret_cast<rte_ipv4_hdr*>(buf);
  h->version_ihl = RTE_IPV4_VHL_DEF;
  h->time_to_live = 2;
  h->next_proto_id = 17;
  // Pick the source address so that the header with TTL 1 sums to 0xffff.
  h->hdr_checksum = 0;
  h->time_to_live = 1;
  uint16_t partial = rte_raw_cksum(h, 20);
  uint16_t fill = static_cast<uint16_t>(0xffff - partial);
  std::memcpy(&h->src_addr, &fill, 2);
  ASSERT_EQ(rte_ipv4_cksum(h), 0);
  h->time_to_live = 2;
  h->hdr_checksum = rte_ipv4_cksum(h);
  ipv4_decrement_ttl(h);
  EXPECT_EQ(h->hdr_checksum, 0);
}

namespace {

config::RouteStage routes(std::vector<config::Route> rs, bool icmp = false) {
  config::RouteStage p;
  p.routes = std::move(rs);
  p.icmp_time_exceeded = icmp;
  return p;
}

FrameSpec to(const std::string& dst, uint8_t ttl = 64) {
  FrameSpec s;
  s.version = dst.find(':') == std::string::npos ? 4 : 6;
  s.src = s.version == 4 ? "192.0.2.2" : "2001:db8:1::2";
  s.dst = dst;
  s.ttl = ttl;
  return s;
}

}  // namespace

TEST_F(Route, ForwardsDecrementsAndPlacesThePacket) {
  Harness h;
  ASSERT_TRUE(h.build({stage(
      "route", routes({route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254"),
                       route("2001:db8:2::/64", "lan")}))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  ASSERT_NE(rs, nullptr);

  rte_mbuf* m = h.run_one(make_frame(to("198.51.100.7", 10)));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).verdict, Verdict::Transmit);  // last stage: placed packets leave
  EXPECT_EQ(meta(m).out_port, kLan);
  EXPECT_EQ(meta(m).nexthop, kNextHopConnected);
  rte_ipv4_hdr* ip4 = pkt::ipv4(m);
  EXPECT_EQ(ip4->time_to_live, 9);
  uint16_t sum = ip4->hdr_checksum;
  ip4->hdr_checksum = 0;
  EXPECT_EQ(sum, rte_ipv4_cksum(ip4));

  m = h.run_one(make_frame(to("203.0.113.1")));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kWan);
  auto gw = h.pipeline->neighbours().find(NeighbourKey::of(PortId{kWan}, address("192.0.2.254")));
  ASSERT_NE(gw, NeighbourTable::kNotFound);
  EXPECT_EQ(meta(m).nexthop, gw);

  m = h.run_one(make_frame(to("2001:db8:2::9", 2)));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kLan);
  EXPECT_EQ(pkt::ipv6(m)->hop_limits, 1);

  // No IPv6 default: no route.
  EXPECT_EQ(h.run_one(make_frame(to("2001:db8:9::1"))), nullptr);
  EXPECT_EQ(h.outcomes.total_snapshot().drops[size_t(DropReason::NO_ROUTE)], 1u);
  EXPECT_EQ(rs->counters().forwarded, 3u);
  EXPECT_EQ(rs->counters().no_route, 1u);
}

TEST_F(Route, HostBoundArpKernelAndDropRoutes) {
  Harness h;
  ASSERT_TRUE(
      h.build({stage("route", routes({route("0.0.0.0/0", "wan", "192.0.2.254"),
                                      route_action("192.0.2.1/32", config::RouteAction::Kernel),
                                      route_action("10.0.0.0/8", config::RouteAction::Drop)}))}));
  for (const char* dst : {"224.0.0.5", "255.255.255.255", "192.0.2.1"}) {
    rte_mbuf* m = h.run_one(make_frame(to(dst)));
    ASSERT_NE(m, nullptr) << dst;
    EXPECT_EQ(meta(m).verdict, Verdict::Kernel) << dst;
  }
  for (const char* dst : {"ff02::1", "fe80::1"}) {
    rte_mbuf* m = h.run_one(make_frame(to(dst)));
    ASSERT_NE(m, nullptr) << dst;
    EXPECT_EQ(meta(m).verdict, Verdict::Kernel) << dst;
  }
  rte_mbuf* arp = h.run_one(make_arp(kWan));
  ASSERT_NE(arp, nullptr);
  EXPECT_EQ(meta(arp).verdict, Verdict::Kernel);

  EXPECT_EQ(h.run_one(make_lldp(kWan)), nullptr);
  EXPECT_EQ(h.run_one(make_frame(to("10.1.2.3"))), nullptr);
  auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::NOT_IP)], 1u);
  EXPECT_EQ(s.drops[size_t(DropReason::NO_ROUTE)], 1u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

TEST_F(Route, EcmpSpreadsFlowsAndKeepsEachFlowOnOneHop) {
  Harness h;
  config::Route r = route("0.0.0.0/0", "wan", "192.0.2.251");
  for (const char* via : {"192.0.2.252", "192.0.2.253", "192.0.2.254"})
    r.nexthops.push_back(config::NextHop{address(via), "wan"});
  ASSERT_TRUE(h.build({stage("route", routes({r}))}));
  std::map<uint32_t, int> per_hop;
  std::map<uint16_t, uint32_t> hop_of_flow;
  for (int round = 0; round < 2; ++round) {
    for (uint16_t sport = 1; sport <= 2000; ++sport) {
      FrameSpec s = to("203.0.113.9");
      s.sport = sport;
      rte_mbuf* m = h.run_one(make_frame(s));
      ASSERT_NE(m, nullptr);
      uint32_t hop = meta(m).nexthop;
      if (round == 0) {
        per_hop[hop]++;
        hop_of_flow[sport] = hop;
      } else {
        ASSERT_EQ(hop_of_flow[sport], hop) << "flow " << sport << " changed next hop";
      }
    }
  }
  ASSERT_EQ(per_hop.size(), 4u);
  for (auto [hop, n] : per_hop) {
    EXPECT_GT(n, 400) << "hop " << hop;  // 500 expected each
    EXPECT_LT(n, 600) << "hop " << hop;
  }
}

TEST_F(Route, ExpiredTtlIsDroppedAndCounted) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "wan", "192.0.2.254"),
                                              route("::/0", "wan", "2001:db8:1::fe")}))}));
  EXPECT_EQ(h.run_one(make_frame(to("203.0.113.1", 1))), nullptr);
  EXPECT_EQ(h.run_one(make_frame(to("203.0.113.1", 0))), nullptr);
  EXPECT_EQ(h.run_one(make_frame(to("2001:db8:9::1", 1))), nullptr);
  auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::TTL_EXPIRED)], 3u);
  EXPECT_EQ(h.pipeline->find<RouteStage>("route")->counters().ttl_expired, 3u);
}

TEST_F(Route, ExpiredTtlIsAnsweredWithIcmpTimeExceeded) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2"),
                                              route("::/0", "lan", "2001:db8:2::2")},
                                             true))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  std::vector<PortAddresses> addrs(2);
  addrs[kWan].v4 = address("192.0.2.1");
  addrs[kWan].v6 = address("2001:db8:1::1");
  rs->set_port_addresses(addrs);

  FrameSpec s = to("203.0.113.1", 1);
  s.port = kWan;
  s.vlan = 42;
  s.payload = 100;
  rte_mbuf* orig = make_frame(s);
  std::vector<uint8_t> quoted(rte_pktmbuf_mtod_offset(orig, uint8_t*, orig->l2_len),
                              rte_pktmbuf_mtod_offset(orig, uint8_t*, orig->data_len));
  rte_mbuf* m = h.run_one(orig);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).verdict, Verdict::Transmit);
  EXPECT_EQ(meta(m).out_port, kWan);  // back where it came from
  auto* eth = pkt::eth(m);
  EXPECT_EQ(std::memcmp(eth->dst_addr.addr_bytes, s.src_mac.bytes.data(), 6), 0);
  EXPECT_EQ(std::memcmp(eth->src_addr.addr_bytes, kWanMac.bytes.data(), 6), 0);
  EXPECT_EQ(m->l2_len, 18);  // the VLAN tag is kept
  auto* ip4 = pkt::ipv4(m);
  EXPECT_EQ(ip4->next_proto_id, IPPROTO_ICMP);
  // Copied out: behind a VLAN tag the header is 2-byte aligned, and EXPECT_EQ binds references.
  EXPECT_EQ(uint32_t{ip4->src_addr}, rte_cpu_to_be_32(address("192.0.2.1").v4_host()));
  EXPECT_EQ(uint32_t{ip4->dst_addr}, rte_cpu_to_be_32(address("192.0.2.2").v4_host()));
  EXPECT_EQ(rte_ipv4_cksum(ip4), 0);  // a valid header sums to zero
  auto* icmp = reinterpret_cast<rte_icmp_hdr*>(ip4 + 1);
  EXPECT_EQ(icmp->icmp_type, 11);
  EXPECT_EQ(icmp->icmp_code, 0);
  const uint16_t icmp_len = rte_be_to_cpu_16(ip4->total_length) - sizeof(rte_ipv4_hdr);
  EXPECT_EQ(icmp_len, 8 + quoted.size());
  EXPECT_EQ(static_cast<uint16_t>(~rte_raw_cksum(icmp, icmp_len)), 0);
  EXPECT_EQ(std::memcmp(icmp + 1, quoted.data(), quoted.size()), 0);
  EXPECT_EQ(m->pkt_len, m->l2_len + 20u + icmp_len);

  FrameSpec s6 = to("2001:db8:9::1", 1);
  s6.port = kWan;
  m = h.run_one(make_frame(s6));
  ASSERT_NE(m, nullptr);
  auto* ip6 = pkt::ipv6(m);
  EXPECT_EQ(ip6->proto, IPPROTO_ICMPV6);
  EXPECT_EQ(std::memcmp(ip6->src_addr, address("2001:db8:1::1").bytes.data(), 16), 0);
  EXPECT_EQ(std::memcmp(ip6->dst_addr, address("2001:db8:1::2").bytes.data(), 16), 0);
  auto* icmp6 = reinterpret_cast<uint8_t*>(ip6 + 1);
  EXPECT_EQ(icmp6[0], 3);
  const uint16_t icmp6_len = rte_be_to_cpu_16(ip6->payload_len);
  uint32_t sum6 = rte_raw_cksum(icmp6, icmp6_len) + uint32_t(rte_ipv6_phdr_cksum(ip6, 0));
  sum6 = (sum6 & 0xffff) + (sum6 >> 16);
  sum6 = (sum6 & 0xffff) + (sum6 >> 16);
  EXPECT_EQ(sum6, 0xffffu);  // a valid ICMPv6 message sums to all ones

  EXPECT_EQ(rs->counters().icmp_sent, 2u);
  EXPECT_EQ(rs->counters().ttl_expired, 2u);
  auto acc = h.accounting();
  EXPECT_EQ(acc.tx, 2u);  // each expired packet left as its own answer
  EXPECT_EQ(acc.unaccounted(), 0) << acc.to_string();
}

TEST_F(Route, NoIcmpAboutIcmpErrorsOrWithoutASourceAddress) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2")}, true))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  // No address on wan yet: expired packets are only dropped.
  EXPECT_EQ(h.run_one(make_frame(to("203.0.113.1", 1))), nullptr);
  std::vector<PortAddresses> addrs(2);
  addrs[kWan].v4 = address("192.0.2.1");
  rs->set_port_addresses(addrs);
  // An ICMP error (time exceeded) with an expired TTL is not answered.
  FrameSpec s = to("203.0.113.1", 1);
  s.proto = IPPROTO_ICMP;
  rte_mbuf* err = make_frame(s);
  *rte_pktmbuf_mtod_offset(err, uint8_t*, err->l2_len + err->l3_len) = 11;
  EXPECT_EQ(h.run_one(err), nullptr);
  EXPECT_EQ(rs->counters().icmp_sent, 0u);
  EXPECT_EQ(h.accounting().drops[size_t(DropReason::TTL_EXPIRED)], 2u);
}

TEST_F(Route, ReplaceKeepsTheOldTableOnError) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "wan", "192.0.2.254")}))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  auto bad = rs->replace_routes({route("10.0.0.0/8", "nosuch")});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("nosuch"), std::string::npos);
  ASSERT_EQ(rs->routes().size(), 1u);
  ASSERT_TRUE(rs->replace_routes({route("10.0.0.0/8", "lan")}));
  ASSERT_EQ(rs->routes().size(), 1u);
  EXPECT_EQ(rs->routes()[0].route.prefix, prefix("10.0.0.0/8"));
  auto r = rs->route_for(address("10.9.9.9"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->route.nexthops[0].port, "lan");
  EXPECT_FALSE(rs->route_for(address("11.0.0.1")));
}
