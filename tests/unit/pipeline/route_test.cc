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

#include "core/offload_feed.h"
#include "core/packet.h"
#include "core/port_mtu.h"
#include "fixture.h"
#include "pipeline/ip_util.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/packet_view.h"
#include "pipeline/route/route_stage.h"

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
    StaticRoute r;
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
      r.nexthops.push_back(NextHop{via, "lan"});
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
      (*table)->lookup4(kDefaultVrfId, ip4, leaves, static_cast<unsigned>(n));
    } else {
      (*table)->lookup6(kDefaultVrfId, ip6, leaves, static_cast<unsigned>(n));
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

RouteConfig routes(std::vector<StaticRoute> rs, bool icmp = false) {
  RouteConfig p;
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
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "wan", "192.0.2.254"),
                                              route_action("192.0.2.1/32", RouteAction::Kernel),
                                              route_action("10.0.0.0/8", RouteAction::Drop)}))}));
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
  StaticRoute r = route("0.0.0.0/0", "wan", "192.0.2.251");
  for (const char* via : {"192.0.2.252", "192.0.2.253", "192.0.2.254"})
    r.nexthops.push_back(NextHop{address(via), "wan"});
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

// The sources of the ICMP errors the stage sends back through wan.
void give_wan_addresses(RouteStage& rs) {
  std::vector<PortAddresses> addrs(2);
  addrs[kWan].v4 = address("192.0.2.1");
  addrs[kWan].v6 = address("2001:db8:1::1");
  rs.icmp_responder().set_port_addresses(addrs);
}

TEST_F(Route, ExpiredTtlIsAnsweredWithIcmpTimeExceeded) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2"),
                                              route("::/0", "lan", "2001:db8:2::2")},
                                             true))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  give_wan_addresses(*rs);

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
  // Each expired packet is a drop under its reason; its answer, built in its buffer, is a
  // packet the stage made, charged to no port.
  EXPECT_EQ(acc.drops[size_t(DropReason::TTL_EXPIRED)], 2u);
  EXPECT_EQ(acc.tx, 0u);
  EXPECT_TRUE(meta(m).flags & kMetaFlagCopy);
  EXPECT_EQ(acc.unaccounted(), 0) << acc.to_string();
}

// Sets or clears an IPv4 packet's DF bit (checksum kept right).
void set_df(rte_mbuf* m, bool df) {
  rte_ipv4_hdr* ip = pkt::ipv4(m);
  const uint16_t off = rte_be_to_cpu_16(ip->fragment_offset);
  ip->fragment_offset = rte_cpu_to_be_16(
      static_cast<uint16_t>(df ? off | RTE_IPV4_HDR_DF_FLAG : off & ~RTE_IPV4_HDR_DF_FLAG));
  ip->hdr_checksum = 0;
  ip->hdr_checksum = rte_ipv4_cksum(ip);
}

// Linux's limits: an error destination (the offending packet's source) gets a burst of six,
// then one a second; another destination has its own; fragmentation needed is exempt, so
// that path MTU discovery never stalls. The rest are only dropped, counted as limited.
TEST_F(Route, IcmpErrorsAreLimitedPerDestinationExceptTooBig) {
  Harness h;
  PortMtuTable mtus(2);
  mtus.set(kLan, 1280);
  h.ctx.mtus = &mtus;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2")}, true))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  give_wan_addresses(*rs);
  auto run = [&](const std::string& src, uint8_t ttl, uint16_t payload = 18) {
    FrameSpec s = to("203.0.113.1", ttl);
    s.port = kWan;
    s.src = src;
    s.payload = payload;
    rte_mbuf* f = make_frame(s);
    if (payload > 18) set_df(f, true);
    return h.run_one(f) != nullptr;  // the harness's sinks keep (and free) what left
  };
  const unsigned kBurst = config::IcmpSection{}.burst;
  unsigned answered = 0;
  for (unsigned i = 0; i < 2 * kBurst; ++i)
    answered += run("192.0.2.2", 1);
  EXPECT_EQ(answered, kBurst) << "one destination: its burst, the rest within the second held";
  EXPECT_EQ(rs->counters().icmp_limited, kBurst);
  answered = 0;
  for (unsigned i = 0; i < 2 * kBurst; ++i)
    answered += run("192.0.2." + std::to_string(10 + i), 1);
  EXPECT_EQ(answered, 2 * kBurst) << "each destination its own bucket";
  answered = 0;
  for (unsigned i = 0; i < 2 * kBurst; ++i)
    answered += run("192.0.2.2", 64, 1500 - 28);
  EXPECT_EQ(answered, 2 * kBurst) << "fragmentation needed is not limited per destination";
  EXPECT_EQ(rs->counters().icmp_sent, 5 * kBurst);
  EXPECT_EQ(rs->counters().ttl_expired, 4 * kBurst);  // the cause, answered or not
  const auto acc = h.accounting();
  EXPECT_EQ(acc.drops[size_t(DropReason::ICMP_LIMITED)], kBurst);
  EXPECT_EQ(acc.drops[size_t(DropReason::TTL_EXPIRED)], 3 * kBurst);
  EXPECT_EQ(acc.unaccounted(), 0);
}

// The file's `icmp:` limits: a smaller burst, no per-destination limit, a per-kind cap.
TEST_F(Route, IcmpLimitsAreTheFiles) {
  auto answered_of_8 = [](config::IcmpSection limits, bool one_source) {
    Harness h;
    h.ctx.icmp = limits;
    EXPECT_TRUE(
        h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2")}, true))}));
    give_wan_addresses(*h.pipeline->find<RouteStage>("route"));
    unsigned answered = 0;
    for (unsigned i = 0; i < 8; ++i) {
      FrameSpec s = to("203.0.113.1", 1);
      s.port = kWan;
      s.src = one_source ? "192.0.2.2" : "192.0.2." + std::to_string(10 + i);
      answered += h.run_one(make_frame(s)) != nullptr;
    }
    EXPECT_EQ(h.accounting().drops[size_t(DropReason::ICMP_LIMITED)], 8 - answered);
    return answered;
  };
  EXPECT_EQ(answered_of_8({.ratelimit_ms = 1000, .burst = 2, .per_second = 1000}, true), 2u);
  EXPECT_EQ(answered_of_8({.ratelimit_ms = 0, .burst = 6, .per_second = 1000}, true), 8u);
  EXPECT_EQ(answered_of_8({.ratelimit_ms = 1000, .burst = 6, .per_second = 3}, false), 3u);
  EXPECT_EQ(answered_of_8({.ratelimit_ms = 0, .burst = 6, .per_second = 0}, true), 8u);
}

TEST_F(Route, PacketsOverTheEgressMtuAreAnsweredWithTheMtu) {
  Harness h;
  PortMtuTable mtus(2);
  mtus.set(kLan, 1280);
  h.ctx.mtus = &mtus;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2"),
                                              route("::/0", "lan", "2001:db8:2::2")}))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  give_wan_addresses(*rs);

  // An IPv4 UDP packet of `l3_bytes` from wan, DF as asked, through the stage.
  auto run_v4 = [&](uint16_t l3_bytes, bool df) {
    FrameSpec s = to("203.0.113.1", 64);
    s.port = kWan;
    s.payload = static_cast<uint16_t>(l3_bytes - 28);
    rte_mbuf* f = make_frame(s);
    set_df(f, df);
    return h.run_one(f);
  };
  // 1500 bytes of IPv4 with DF: fragmentation needed, next-hop MTU 1280, from wan's address.
  rte_mbuf* m = run_v4(1500, true);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kWan);
  EXPECT_TRUE(meta(m).flags & kMetaFlagCopy);
  auto* ip4 = pkt::ipv4(m);
  EXPECT_EQ(uint32_t{ip4->src_addr}, rte_cpu_to_be_32(address("192.0.2.1").v4_host()));
  auto* icmp = reinterpret_cast<rte_icmp_hdr*>(ip4 + 1);
  EXPECT_EQ(icmp->icmp_type, 3);
  EXPECT_EQ(icmp->icmp_code, 4);
  EXPECT_EQ(rte_be_to_cpu_16(icmp->icmp_seq_nb), 1280);  // the second word's low half
  const uint16_t icmp_len = rte_be_to_cpu_16(ip4->total_length) - sizeof(rte_ipv4_hdr);
  EXPECT_EQ(static_cast<uint16_t>(~rte_raw_cksum(icmp, icmp_len)), 0);
  // The quoted header is the packet's as it arrived: TTL not decremented.
  EXPECT_EQ(reinterpret_cast<rte_ipv4_hdr*>(icmp + 1)->time_to_live, 64);

  // Without DF it goes on, for the tx adapter to fragment.
  m = run_v4(1500, false);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kLan);
  EXPECT_FALSE(meta(m).flags & kMetaFlagCopy);
  EXPECT_EQ(pkt::ipv4(m)->time_to_live, 63);

  // Exactly the MTU fits.
  m = run_v4(1280, true);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kLan);

  // IPv6 over the MTU: packet too big, MTU 1280.
  FrameSpec s6 = to("2001:db8:9::1", 64);
  s6.port = kWan;
  s6.payload = 1400;
  m = h.run_one(make_frame(s6));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kWan);
  auto* ip6 = pkt::ipv6(m);
  EXPECT_EQ(std::memcmp(ip6->src_addr, address("2001:db8:1::1").bytes.data(), 16), 0);
  auto* icmp6 = reinterpret_cast<uint8_t*>(ip6 + 1);
  EXPECT_EQ(icmp6[0], 2);
  EXPECT_EQ(icmp6[1], 0);
  uint32_t mtu6;
  std::memcpy(&mtu6, icmp6 + 4, 4);
  EXPECT_EQ(rte_be_to_cpu_32(mtu6), 1280u);
  EXPECT_LE(m->pkt_len - m->l2_len, 1280u);  // the answer fits the minimum IPv6 MTU

  // Each too-big packet is a drop under its reason; the answers are charged to no port.
  EXPECT_EQ(rs->counters().too_big, 2u);
  EXPECT_EQ(rs->counters().icmp_sent, 2u);
  auto acc = h.accounting();
  EXPECT_EQ(acc.drops[size_t(DropReason::PACKET_TOO_BIG)], 2u);
  EXPECT_EQ(acc.tx, 2u);  // the packet without DF and the one that fit
  EXPECT_EQ(acc.unaccounted(), 0) << acc.to_string();

  // The MTU follows the port: at 1500 the same packet is forwarded.
  mtus.set(kLan, 1500);
  m = run_v4(1500, true);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kLan);
}

TEST_F(Route, TooBigWithoutASourceAddressIsOnlyDropped) {
  Harness h;
  PortMtuTable mtus(2);
  mtus.set(kLan, 1280);
  h.ctx.mtus = &mtus;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2")}))}));
  FrameSpec s = to("203.0.113.1", 64);
  s.port = kWan;
  s.payload = 1400;
  rte_mbuf* big = make_frame(s);
  set_df(big, true);
  EXPECT_EQ(h.run_one(big), nullptr);
  EXPECT_EQ(h.accounting().drops[size_t(DropReason::PACKET_TOO_BIG)], 1u);
  EXPECT_EQ(h.pipeline->find<RouteStage>("route")->counters().icmp_sent, 0u);
}

TEST_F(Route, NoIcmpAboutIcmpErrorsOrWithoutASourceAddress) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "lan", "198.51.100.2")}, true))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  // No address on wan yet: expired packets are only dropped.
  EXPECT_EQ(h.run_one(make_frame(to("203.0.113.1", 1))), nullptr);
  std::vector<PortAddresses> addrs(2);
  addrs[kWan].v4 = address("192.0.2.1");
  rs->icmp_responder().set_port_addresses(addrs);
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

// Offloaded flows are taken back to user space when their route may have changed: a change of
// one IP version's routes concerns that version's flows only, and an unchanged list none (a
// fresh link's IPv6 routes and kernel sync's repeated lists must not take IPv4 flows back).
TEST_F(Route, ARouteChangeConcernsTheOffloadedFlowsOfItsIpVersion) {
  auto feed = OffloadFeed::create(1, 2);
  ASSERT_TRUE(feed) << feed.error().message;
  Harness h;
  h.ctx.offload = feed->get();
  ASSERT_TRUE(h.build({stage("route", routes({route("0.0.0.0/0", "wan", "192.0.2.254")}))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  auto counts = [&] {
    const uint64_t c = (*feed)->changes();
    return std::pair{offload_changes_of(c, 4), offload_changes_of(c, 6)};
  };
  const auto start = counts();

  ASSERT_TRUE(rs->set_kernel_routes({route("2001:db8:1::/64", "lan")}));
  EXPECT_EQ(counts(), std::pair(start.first, start.second + 1));
  ASSERT_TRUE(rs->set_kernel_routes({route("2001:db8:1::/64", "lan")}));
  EXPECT_EQ(counts(), std::pair(start.first, start.second + 1));
  ASSERT_TRUE(
      rs->set_kernel_routes({route("10.1.0.0/16", "lan"), route("2001:db8:1::/64", "lan")}));
  EXPECT_EQ(counts(), std::pair(start.first + 1, start.second + 1));
  ASSERT_TRUE(rs->replace_routes(
      {route("0.0.0.0/0", "wan", "192.0.2.254"), route("2001:db8:2::/64", "wan")}));
  EXPECT_EQ(counts(), std::pair(start.first + 1, start.second + 2));
  ASSERT_TRUE(rs->replace_routes({route("0.0.0.0/0", "wan", "192.0.2.1")}));
  EXPECT_EQ(counts(), std::pair(start.first + 2, start.second + 3));
}

// ---- RFC 1812 / RFC 4291 checks -------------------------------------------------------------

TEST(Ipv4Checksum, VerificationAgreesWithTheFullSum) {
  std::mt19937_64 rng(12);
  uint8_t buf[60];
  auto* h = reinterpret_cast<rte_ipv4_hdr*>(buf);
  size_t wrong_seen = 0;
  for (int i = 0; i < 100'000; ++i) {
    for (auto& b : buf)
      b = static_cast<uint8_t>(rng());
    h->version_ihl = static_cast<uint8_t>(0x40 | (5 + rng() % 11));  // with options, too
    // A random checksum: right about once in 65536, and the verdict must be the full sum's.
    ASSERT_EQ(ipv4_checksum_ok(h), rte_ipv4_cksum(h) == 0) << "iteration " << i;
    wrong_seen += !ipv4_checksum_ok(h);
    // The right checksum, then every single bit of the header flipped in turn.
    h->hdr_checksum = 0;
    h->hdr_checksum = rte_ipv4_cksum(h);
    ASSERT_TRUE(ipv4_checksum_ok(h)) << "iteration " << i;
    const size_t bytes = size_t(h->version_ihl & 0x0f) * 4;
    for (size_t bit = 8; bit < bytes * 8; ++bit) {  // past the version/IHL byte
      buf[bit / 8] ^= uint8_t(1u << (bit % 8));
      ASSERT_FALSE(ipv4_checksum_ok(h)) << "iteration " << i << " bit " << bit;
      buf[bit / 8] ^= uint8_t(1u << (bit % 8));
    }
  }
  EXPECT_GT(wrong_seen, 99'000u);
  // The checksum field holding 0xffff where the sum makes it 0x0000: the other one's
  // complement zero, which a receiver accepts (RFC 1624 §3).
  std::memset(buf, 0, sizeof(buf));
  h->version_ihl = RTE_IPV4_VHL_DEF;
  h->time_to_live = 1;
  h->next_proto_id = 17;
  const uint16_t partial = rte_raw_cksum(h, 20);
  const uint16_t fill = static_cast<uint16_t>(0xffff - partial);
  std::memcpy(&h->src_addr, &fill, 2);
  ASSERT_EQ(rte_ipv4_cksum(h), 0);  // the header sums to 0xffff with a zero checksum
  EXPECT_TRUE(ipv4_checksum_ok(h));
  h->hdr_checksum = 0xffff;
  EXPECT_TRUE(ipv4_checksum_ok(h));
}

namespace {

FrameSpec from_to(const std::string& src, const std::string& dst) {
  FrameSpec s = to(dst);
  s.src = src;
  return s;
}

rte_mbuf* with_wrong_checksum(rte_mbuf* m) {
  pkt::ipv4(m)->hdr_checksum ^= rte_cpu_to_be_16(0x0100);
  return m;
}

RouteConfig checked(std::vector<StaticRoute> rs, bool ipv4_checksum, bool martians) {
  RouteConfig p = routes(std::move(rs));
  p.checks.ipv4_checksum = ipv4_checksum;
  p.checks.martians = martians;
  return p;
}

// A default route each way, the box's own address (a kernel route, as routes from the kernel
// give it), and one of its IPv4 link-local addresses.
std::vector<StaticRoute> edge_routes() {
  return {route("0.0.0.0/0", "wan", "192.0.2.254"), route("::/0", "wan", "2001:db8:1::fe"),
          route_action("192.0.2.1/32", RouteAction::Kernel),
          route_action("169.254.7.1/32", RouteAction::Kernel)};
}

// What a packet came to in a harness, as a word.
std::string outcome(Harness& h, rte_mbuf* m) {
  const AccountingSnapshot before = h.accounting();
  rte_mbuf* out = h.run_one(m);
  if (out != nullptr) return meta(out).verdict == Verdict::Kernel ? "kernel" : "forwarded";
  const AccountingSnapshot after = h.accounting();
  for (size_t r = 0; r < kDropReasonCount; ++r)
    if (after.drops[r] != before.drops[r]) return std::string(drop_reason_name(DropReason(r)));
  return "lost";
}

}  // namespace

// RFC 1812 §5.2.2: a wrong IPv4 header checksum is dropped whatever the destination, as Linux
// drops it in ip_rcv before anything else; IPv6 has no header checksum.
TEST_F(Route, WrongIpv4ChecksumIsDroppedWhateverTheDestination) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes(edge_routes()))}));
  auto* rs = h.pipeline->find<RouteStage>("route");
  EXPECT_TRUE(rs->checks().ipv4_checksum && rs->checks().martians) << "on by default";
  for (const char* dst : {"203.0.113.1", "192.0.2.1", "224.0.0.5", "255.255.255.255"}) {
    EXPECT_EQ(outcome(h, with_wrong_checksum(make_frame(to(dst)))), "ipv4_bad_checksum") << dst;
    EXPECT_EQ(outcome(h, make_frame(to(dst))),
              dst == std::string("203.0.113.1") ? "forwarded" : "kernel")
        << dst;
  }
  FrameSpec ttl1 = to("203.0.113.1", 1);
  EXPECT_EQ(outcome(h, with_wrong_checksum(make_frame(ttl1))), "ipv4_bad_checksum")
      << "checked before the TTL";
  EXPECT_EQ(outcome(h, make_frame(to("2001:db8:2::9"))), "forwarded");
  const auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::IPV4_BAD_CHECKSUM)], 5u);
  EXPECT_EQ(rs->counters().bad_checksum, 5u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

// A port that verified the header says so in the mbuf: its verdict is taken, and the header
// is summed only where it gave none.
TEST_F(Route, PortChecksumVerdictIsTakenWhereItGaveOne) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes(edge_routes()))}));
  struct Case {
    uint64_t flags;
    bool right;  // the checksum in the packet
    const char* expect;
  };
  const Case cases[] = {
      {RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN, true, "forwarded"},
      {RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN, false, "ipv4_bad_checksum"},
      {RTE_MBUF_F_RX_IP_CKSUM_GOOD, false, "forwarded"},
      {RTE_MBUF_F_RX_IP_CKSUM_BAD, true, "ipv4_bad_checksum"},
      // NONE: the checksum in the packet is wrong, the header was verified.
      {RTE_MBUF_F_RX_IP_CKSUM_NONE, false, "forwarded"},
  };
  for (const Case& c : cases) {
    rte_mbuf* m = make_frame(to("203.0.113.1"));
    if (!c.right) with_wrong_checksum(m);
    m->ol_flags |= c.flags;
    EXPECT_EQ(outcome(h, m), c.expect) << "flags " << c.flags << ", right " << c.right;
  }
  EXPECT_EQ(h.accounting().unaccounted(), 0);
}

// Sources no packet on a wire carries are dropped before the local-delivery decision, as Linux
// does in ip_route_input and ip6_rcv: to the box's own address, to multicast and when routed.
TEST_F(Route, MartianSourcesAreDroppedWhateverTheDestination) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes(edge_routes()))}));
  for (const char* src : {"127.0.0.1", "127.255.0.9", "224.0.0.5", "239.1.1.1", "240.0.0.1",
                          "255.255.255.254", "255.255.255.255"}) {
    for (const char* dst : {"203.0.113.1", "192.0.2.1", "224.0.0.5", "255.255.255.255"}) {
      EXPECT_EQ(outcome(h, make_frame(from_to(src, dst))), "martian_source") << src << " " << dst;
    }
  }
  for (const char* src : {"::1", "ff02::1", "ff05::2"}) {
    for (const char* dst : {"2001:db8:2::9", "fe80::1", "ff02::1"}) {
      EXPECT_EQ(outcome(h, make_frame(from_to(src, dst))), "martian_source") << src << " " << dst;
    }
  }
  // Their neighbours in the address space are ordinary sources.
  for (const char* src : {"1.0.0.0", "126.255.255.255", "128.0.0.0", "223.255.255.255", "::2",
                          "fe80::1", "fe00::1"}) {
    EXPECT_EQ(outcome(h, make_frame(from_to(src, src[0] == 'f' || src[1] == ':' ? "2001:db8:2::9"
                                                                                : "203.0.113.1"))),
              "forwarded")
        << src;
  }
  const auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::MARTIAN_SOURCE)], 7u * 4 + 3u * 3);
  EXPECT_EQ(h.pipeline->find<RouteStage>("route")->counters().martian_source, 7u * 4 + 3u * 3);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

// 0/8 and :: are sources of hosts that have no address yet: what they send to the box itself
// (DHCP to the limited broadcast, IGMP to a multicast group, IPv6 duplicate address detection
// to a solicited-node group) reaches the kernel; anything to be routed is martian.
TEST_F(Route, UnspecifiedSourcesReachTheBoxButAreNotRouted) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes(edge_routes()))}));
  EXPECT_EQ(outcome(h, make_frame(from_to("0.0.0.0", "255.255.255.255"))), "kernel");
  EXPECT_EQ(outcome(h, make_frame(from_to("0.0.0.0", "224.0.0.22"))), "kernel");
  FrameSpec dad = from_to("::", "ff02::1:ff00:1");
  dad.proto = IPPROTO_ICMPV6;
  EXPECT_EQ(outcome(h, make_frame(dad)), "kernel");
  EXPECT_EQ(outcome(h, make_frame(from_to("0.0.0.0", "203.0.113.1"))), "martian_source");
  EXPECT_EQ(outcome(h, make_frame(from_to("0.1.2.3", "203.0.113.1"))), "martian_source");
  EXPECT_EQ(outcome(h, make_frame(from_to("0.0.0.0", "192.0.2.1"))), "martian_source")
      << "a unicast address, even the box's, is no destination for a host without one";
  EXPECT_EQ(outcome(h, make_frame(from_to("::", "2001:db8:2::9"))), "martian_source");
  const auto s = h.accounting();
  EXPECT_EQ(s.to_kernel, 3u);
  EXPECT_EQ(s.drops[size_t(DropReason::MARTIAN_SOURCE)], 4u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

// Destinations no packet on a wire carries are dropped; a link-local destination is the box's
// own (to the kernel) or nobody's (never forwarded).
TEST_F(Route, MartianDestinations) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes(edge_routes()))}));
  for (const char* dst :
       {"0.0.0.0", "0.255.1.2", "127.0.0.1", "127.1.2.3", "169.254.1.1", "::", "::1"}) {
    EXPECT_EQ(outcome(h, make_frame(to(dst))), "martian_destination") << dst;
  }
  FrameSpec expired = to("169.254.1.1", 1);
  EXPECT_EQ(outcome(h, make_frame(expired)), "martian_destination") << "before the TTL";
  // The box's own link-local addresses reach the kernel: IPv4 through its kernel route, IPv6
  // (where NDP and routing protocols answer) always.
  EXPECT_EQ(outcome(h, make_frame(to("169.254.7.1"))), "kernel");
  EXPECT_EQ(outcome(h, make_frame(to("fe80::1"))), "kernel");
  // Neighbours of the martian ranges are routed.
  for (const char* dst : {"1.0.0.0", "126.255.255.255", "128.0.0.1", "169.253.255.255",
                          "169.255.0.0", "::2", "2001:db8:2::1"}) {
    EXPECT_EQ(outcome(h, make_frame(to(dst))), "forwarded") << dst;
  }
  const auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::MARTIAN_DESTINATION)], 8u);
  EXPECT_EQ(h.pipeline->find<RouteStage>("route")->counters().martian_destination, 8u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

// Each check has its switch; off, the packet is treated as before the checks existed.
TEST_F(Route, ChecksCanBeSwitchedOffOneByOne) {
  struct Switches {
    bool ipv4_checksum, martians;
  };
  for (const Switches sw : {Switches{false, false}, Switches{false, true}, Switches{true, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << "ipv4_checksum " << sw.ipv4_checksum << ", martians " << sw.martians);
    Harness h;
    ASSERT_TRUE(h.build({stage("route", checked(edge_routes(), sw.ipv4_checksum, sw.martians))}));
    EXPECT_EQ(outcome(h, with_wrong_checksum(make_frame(to("203.0.113.1")))),
              sw.ipv4_checksum ? "ipv4_bad_checksum" : "forwarded");
    EXPECT_EQ(outcome(h, make_frame(from_to("127.0.0.1", "203.0.113.1"))),
              sw.martians ? "martian_source" : "forwarded");
    EXPECT_EQ(outcome(h, make_frame(from_to("0.0.0.0", "203.0.113.1"))),
              sw.martians ? "martian_source" : "forwarded");
    EXPECT_EQ(outcome(h, make_frame(from_to("::1", "2001:db8:2::9"))),
              sw.martians ? "martian_source" : "forwarded");
    EXPECT_EQ(outcome(h, make_frame(to("169.254.1.1"))),
              sw.martians ? "martian_destination" : "forwarded");
    EXPECT_EQ(outcome(h, make_frame(to("::1"))), sw.martians ? "martian_destination" : "forwarded");
    EXPECT_EQ(outcome(h, make_frame(to("127.0.0.1"))),
              sw.martians ? "martian_destination" : "forwarded");
    EXPECT_EQ(h.accounting().unaccounted(), 0);
  }
}

// One vector of many packets, every outcome mixed, over several lookup batches: each packet is
// counted once, under its reason, at the stage and at its ingress port.
TEST_F(Route, MixedVectorIsAccountedExactly) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", routes(edge_routes()))}));
  std::vector<rte_mbuf*> pkts;
  std::map<std::string, uint64_t> expect;
  std::map<std::pair<uint16_t, std::string>, uint64_t> expect_at;  // by ingress port
  for (int i = 0; i < 300; ++i) {
    FrameSpec s = to("203.0.113.1");
    s.port = i % 2 ? kLan : kWan;
    s.sport = static_cast<uint16_t>(i);
    std::string what = "forwarded";
    rte_mbuf* m = nullptr;
    switch (i % 7) {
      case 0:
        m = with_wrong_checksum(make_frame(s));
        what = "ipv4_bad_checksum";
        break;
      case 1:
        s.src = "127.0.0.1";
        what = "martian_source";
        break;
      case 2:
        s.dst = "169.254.3.3";
        what = "martian_destination";
        break;
      case 3:
        s.version = 6;
        s.src = "::";
        s.dst = "2001:db8:2::9";
        what = "martian_source";
        break;
      case 4:
        s.dst = "192.0.2.1";
        what = "kernel";
        break;
      case 5:
        s.version = 6;
        s.src = "2001:db8:1::2";
        s.dst = "::1";
        what = "martian_destination";
        break;
      default:
        break;
    }
    pkts.push_back(m != nullptr ? m : make_frame(s));
    ++expect[what];
    ++expect_at[{s.port, what}];
  }
  h.run(pkts);
  const auto s = h.accounting();
  EXPECT_EQ(s.rx, 300u);
  EXPECT_EQ(h.sinks.tx.size(), expect["forwarded"]);
  EXPECT_EQ(s.to_kernel, expect["kernel"]);
  EXPECT_EQ(s.drops[size_t(DropReason::IPV4_BAD_CHECKSUM)], expect["ipv4_bad_checksum"]);
  EXPECT_EQ(s.drops[size_t(DropReason::MARTIAN_SOURCE)], expect["martian_source"]);
  EXPECT_EQ(s.drops[size_t(DropReason::MARTIAN_DESTINATION)], expect["martian_destination"]);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  const RouteCounters c = h.pipeline->find<RouteStage>("route")->counters();
  EXPECT_EQ(c.forwarded, expect["forwarded"]);
  EXPECT_EQ(c.to_kernel, expect["kernel"]);
  EXPECT_EQ(c.bad_checksum, expect["ipv4_bad_checksum"]);
  EXPECT_EQ(c.martian_source, expect["martian_source"]);
  EXPECT_EQ(c.martian_destination, expect["martian_destination"]);
  // Each drop is charged to the port the packet came in on.
  for (uint16_t port : {kWan, kLan}) {
    const auto p = h.outcomes.port_snapshot(PortId{port});
    EXPECT_EQ(p.rx, 150u) << port;
    for (const char* reason : {"ipv4_bad_checksum", "martian_source", "martian_destination"}) {
      EXPECT_EQ(p.drops[size_t(*drop_reason_from_name(reason))], (expect_at[{port, reason}]))
          << port << " " << reason;
    }
  }
}
