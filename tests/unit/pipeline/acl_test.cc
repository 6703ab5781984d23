// The acl stage: rte_acl classification against a plain first-match reference (1 000 rules,
// a million 5-tuples, IPv4 and IPv6), per-rule counters, and replacing the rule set.
#include <random>

#include <gtest/gtest.h>

#include <rte_icmp.h>
#include <rte_ip.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/acl/acl_stage.h"
#include "pipeline/acl/acl_table.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

class Acl : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

struct Tuple {
  uint8_t version;
  IpAddress src, dst;
  uint8_t proto;
  uint16_t sport, dport;  // host order; 0 for protocols without ports
};

bool in(const std::optional<IpPrefix>& p, const IpAddress& a) {
  return !p || p->contains(a);
}

// First match wins; a rule with prefixes of one version never matches the other.
long reference(const AclConfig& acl, const Tuple& t) {
  for (size_t i = 0; i < acl.rules.size(); ++i) {
    const auto& m = acl.rules[i].match;
    if (m.src && m.src->addr.version != t.version) continue;
    if (m.dst && m.dst->addr.version != t.version) continue;
    if (!in(m.src, t.src) || !in(m.dst, t.dst)) continue;
    if (m.l4_proto && *m.l4_proto != t.proto) continue;
    if (m.src_port && (t.sport < m.src_port->low || t.sport > m.src_port->high)) continue;
    if (m.dst_port && (t.dport < m.dst_port->low || t.dport > m.dst_port->high)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

IpAddress random_addr(std::mt19937_64& rng, uint8_t version) {
  IpAddress a;
  a.version = version;
  for (unsigned i = 0; i < (version == 4 ? 4u : 16u); ++i)
    a.bytes[i] = static_cast<uint8_t>(rng());
  return a;
}

IpPrefix random_prefix(std::mt19937_64& rng, uint8_t version) {
  unsigned len = version == 4 ? 8 + rng() % 25 : 16 + rng() % 113;
  IpAddress a = random_addr(rng, version);
  unsigned max = version == 4 ? 32 : 128;
  for (unsigned bit = len; bit < max; ++bit)
    a.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  return IpPrefix{a, static_cast<uint8_t>(len)};
}

IpAddress inside(std::mt19937_64& rng, const IpPrefix& p) {
  IpAddress a = random_addr(rng, p.addr.version);
  for (unsigned bit = 0; bit < p.length; ++bit) {
    uint8_t m = static_cast<uint8_t>(0x80u >> (bit % 8));
    a.bytes[bit / 8] = static_cast<uint8_t>((a.bytes[bit / 8] & ~m) | (p.addr.bytes[bit / 8] & m));
  }
  return a;
}

config::PortRange random_range(std::mt19937_64& rng) {
  if (rng() % 3 == 0) {
    uint16_t p = static_cast<uint16_t>(rng());
    return {p, p};
  }
  uint16_t a = static_cast<uint16_t>(rng()), b = static_cast<uint16_t>(rng());
  return {std::min(a, b), std::max(a, b)};
}

AclConfig random_acl(std::mt19937_64& rng, size_t rules) {
  AclConfig acl;
  acl.default_action = AclAction::Permit;
  for (size_t i = 0; i < rules; ++i) {
    AclRule r;
    r.name = fmt::format("r{}", i);
    r.action = rng() % 2 ? AclAction::Permit : AclAction::Deny;
    unsigned fam = rng() % 10;  // 4 in 10 IPv4, 4 in 10 IPv6, 2 in 10 either
    if (fam < 8) {
      uint8_t v = fam < 4 ? 4 : 6;
      if (rng() % 10 < 6) r.match.src = random_prefix(rng, v);
      if (rng() % 10 < 6 || !r.match.src) r.match.dst = random_prefix(rng, v);
    }
    unsigned p = rng() % 10;
    if (p < 5) {
      r.match.l4_proto = IPPROTO_TCP;
    } else if (p < 8) {
      r.match.l4_proto = IPPROTO_UDP;
    } else if (p < 9) {
      r.match.l4_proto = IPPROTO_ICMP;
    }
    if (r.match.l4_proto == IPPROTO_TCP || r.match.l4_proto == IPPROTO_UDP) {
      if (rng() % 2) r.match.src_port = random_range(rng);
      if (rng() % 2) r.match.dst_port = random_range(rng);
    }
    // A rule for either version narrows by port, so that no early rule takes every packet
    // and shadows the rest.
    if (!r.match.src && !r.match.dst) {
      r.match.l4_proto = rng() % 2 ? IPPROTO_TCP : IPPROTO_UDP;
      uint16_t p0 = static_cast<uint16_t>(rng());
      r.match.dst_port = config::PortRange{p0, static_cast<uint16_t>(std::min(65535, p0 + 100))};
    }
    acl.rules.push_back(r);
  }
  return acl;
}

Tuple random_tuple(std::mt19937_64& rng, const AclConfig& acl) {
  Tuple t;
  const AclRule* aim = rng() % 2 ? &acl.rules[rng() % acl.rules.size()] : nullptr;
  const auto* m = aim ? &aim->match : nullptr;
  t.version = m && m->src   ? m->src->addr.version
              : m && m->dst ? m->dst->addr.version
                            : (rng() % 2 ? 4 : 6);
  t.src = m && m->src ? inside(rng, *m->src) : random_addr(rng, t.version);
  t.dst = m && m->dst ? inside(rng, *m->dst) : random_addr(rng, t.version);
  static const uint8_t protos[] = {IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, IPPROTO_GRE};
  t.proto = m && m->l4_proto ? *m->l4_proto : protos[rng() % 4];
  bool ports = t.proto == IPPROTO_TCP || t.proto == IPPROTO_UDP;
  auto pick = [&](const std::optional<config::PortRange>& r) -> uint16_t {
    if (!ports) return 0;
    if (r) return static_cast<uint16_t>(r->low + rng() % (uint32_t(r->high) - r->low + 1));
    return static_cast<uint16_t>(rng());
  };
  t.sport = pick(m ? m->src_port : std::nullopt);
  t.dport = pick(m ? m->dst_port : std::nullopt);
  return t;
}

}  // namespace

TEST_F(Acl, ClassificationMatchesReferenceFirstMatch) {
  std::mt19937_64 rng(7);
  const AclConfig acl = random_acl(rng, 1000);
  auto table = AclTable::build(acl, 1);
  ASSERT_TRUE(table) << table.error().message;

  constexpr size_t kTuples = 1'000'000;
  constexpr uint32_t kBatch = 64;
  AclKey4 k4[kBatch];
  AclKey6 k6[kBatch];
  const uint8_t* p4[kBatch];
  const uint8_t* p6[kBatch];
  uint32_t r4[kBatch], r6[kBatch];
  Tuple t4[kBatch], t6[kBatch];
  size_t mismatches = 0, matched = 0;
  long deepest = -1;  // the last rule that decided a tuple: late rules were reached too
  for (size_t done = 0; done < kTuples; done += kBatch) {
    uint32_t n4 = 0, n6 = 0;
    for (uint32_t i = 0; i < kBatch; ++i) {
      Tuple t = random_tuple(rng, acl);
      if (t.version == 4) {
        AclKey4& k = k4[n4];
        k = {};
        k.proto = t.proto;
        std::memcpy(&k.src, t.src.bytes.data(), 4);
        std::memcpy(&k.dst, t.dst.bytes.data(), 4);
        k.src_port = rte_cpu_to_be_16(t.sport);
        k.dst_port = rte_cpu_to_be_16(t.dport);
        p4[n4] = reinterpret_cast<const uint8_t*>(&k);
        t4[n4++] = t;
      } else {
        AclKey6& k = k6[n6];
        k = {};
        k.proto = t.proto;
        std::memcpy(k.src, t.src.bytes.data(), 16);
        std::memcpy(k.dst, t.dst.bytes.data(), 16);
        k.src_port = rte_cpu_to_be_16(t.sport);
        k.dst_port = rte_cpu_to_be_16(t.dport);
        p6[n6] = reinterpret_cast<const uint8_t*>(&k);
        t6[n6++] = t;
      }
    }
    (*table)->classify4(p4, r4, n4);
    (*table)->classify6(p6, r6, n6);
    auto check = [&](const Tuple& t, uint32_t got) {
      long ref = reference(acl, t);
      uint32_t expect = ref < 0 ? AclTable::kNoMatch : static_cast<uint32_t>(ref + 1);
      matched += ref >= 0;
      deepest = std::max(deepest, ref);
      if (got != expect && ++mismatches <= 5) {
        ADD_FAILURE() << t.src.to_string() << " -> " << t.dst.to_string() << " proto "
                      << int(t.proto) << " " << t.sport << "->" << t.dport << ": rte_acl " << got
                      << ", reference " << expect;
      }
    };
    for (uint32_t i = 0; i < n4; ++i)
      check(t4[i], r4[i]);
    for (uint32_t i = 0; i < n6; ++i)
      check(t6[i], r6[i]);
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(matched, kTuples / 4);
  EXPECT_LT(matched, kTuples);
  EXPECT_GT(deepest, 900);
}

namespace {

AclRule rule(std::string name, AclAction action, config::FiveTupleMatch m) {
  AclRule r;
  r.name = std::move(name);
  r.action = action;
  r.match = m;
  return r;
}

AclConfig lab_acl() {
  AclConfig acl;
  config::FiveTupleMatch telnet;
  telnet.l4_proto = IPPROTO_TCP;
  telnet.dst_port = config::PortRange{23, 23};
  config::FiveTupleMatch lab;
  lab.src = prefix("198.51.100.0/24");
  lab.l4_proto = IPPROTO_UDP;
  lab.dst_port = config::PortRange{1000, 2000};
  config::FiveTupleMatch v6;
  v6.dst = prefix("2001:db8:bad::/48");
  acl.rules = {rule("no-telnet", AclAction::Deny, telnet), rule("lab", AclAction::Permit, lab),
               rule("bad-net", AclAction::Deny, v6)};
  acl.default_action = AclAction::Deny;
  return acl;
}

rte_mbuf* pkt(const std::string& src, const std::string& dst, uint8_t proto, uint16_t dport) {
  FrameSpec s;
  s.version = src.find(':') == std::string::npos ? 4 : 6;
  s.src = src;
  s.dst = dst;
  s.proto = proto;
  s.dport = dport;
  return make_frame(s);
}

}  // namespace

TEST_F(Acl, StagePermitsDeniesAndCountsPerRule) {
  Harness h;
  ASSERT_TRUE(h.build({stage("acl", lab_acl())}));
  auto* acl = h.pipeline->find<AclStage>("acl");
  ASSERT_NE(acl, nullptr);
  std::vector<rte_mbuf*> in = {
      pkt("10.0.0.1", "10.0.0.2", IPPROTO_TCP, 23),            // no-telnet: deny
      pkt("2001:db8::1", "2001:db8::2", IPPROTO_TCP, 23),      // no-telnet (either version)
      pkt("198.51.100.9", "10.0.0.2", IPPROTO_UDP, 1500),      // lab: permit
      pkt("198.51.100.9", "10.0.0.2", IPPROTO_UDP, 2001),      // default: deny
      pkt("2001:db8::1", "2001:db8:bad::1", IPPROTO_UDP, 53),  // bad-net: deny
  };
  uint32_t lab_bytes = in[2]->pkt_len;
  in.push_back(make_arp(kWan));  // not IP: passes the ACL
  h.run(in);
  auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::ACL_DENY)], 4u);
  // The permitted packet and the ARP frame went on (and, unrouted, were dropped at the end).
  EXPECT_EQ(s.drops[size_t(DropReason::NO_ROUTE)], 2u);
  auto rules = acl->rules();
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].name, "no-telnet");
  EXPECT_EQ(rules[0].count.packets, 2u);
  EXPECT_EQ(rules[1].count.packets, 1u);
  EXPECT_EQ(rules[1].count.bytes, lab_bytes);
  EXPECT_EQ(rules[2].count.packets, 1u);
  EXPECT_EQ(rules[3].name, "default");
  EXPECT_EQ(rules[3].count.packets, 1u);
}

// `reject` drops as deny does, under acl_reject, and answers the sender from the ingress
// port's address: ICMP destination unreachable, administratively prohibited (3/13), ICMPv6
// destination unreachable, administratively prohibited (1/1). Without an address on the port
// there is no source for an answer: only dropped.
TEST_F(Acl, RejectAnswersAdministrativelyProhibited) {
  Harness h;
  AclConfig acl;
  config::FiveTupleMatch telnet;
  telnet.l4_proto = IPPROTO_TCP;
  telnet.dst_port = config::PortRange{23, 23};
  acl.rules = {rule("no-telnet", AclAction::Reject, telnet)};
  ASSERT_TRUE(h.build({stage("acl", acl)}));
  auto* stage = h.pipeline->find<AclStage>("acl");
  EXPECT_EQ(h.run_one(pkt("192.0.2.2", "198.51.100.2", IPPROTO_TCP, 23)), nullptr);

  std::vector<PortAddresses> addrs(2);
  addrs[kWan].v4 = address("192.0.2.1");
  addrs[kWan].v6 = address("2001:db8:1::1");
  stage->icmp_responder().set_port_addresses(addrs);
  rte_mbuf* m = h.run_one(pkt("192.0.2.2", "198.51.100.2", IPPROTO_TCP, 23));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kWan);
  auto* ip4 = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
  EXPECT_EQ(uint32_t{ip4->src_addr}, rte_cpu_to_be_32(address("192.0.2.1").v4_host()));
  EXPECT_EQ(uint32_t{ip4->dst_addr}, rte_cpu_to_be_32(address("192.0.2.2").v4_host()));
  auto* icmp = reinterpret_cast<rte_icmp_hdr*>(ip4 + 1);
  EXPECT_EQ(icmp->icmp_type, 3);
  EXPECT_EQ(icmp->icmp_code, 13);
  m = h.run_one(pkt("2001:db8:1::2", "2001:db8:2::2", IPPROTO_TCP, 23));
  ASSERT_NE(m, nullptr);
  auto* icmp6 =
      reinterpret_cast<uint8_t*>(rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, m->l2_len) + 1);
  EXPECT_EQ(icmp6[0], 1);
  EXPECT_EQ(icmp6[1], 1);
  // What is not rejected goes on.
  EXPECT_EQ(h.run_one(pkt("192.0.2.2", "198.51.100.2", IPPROTO_TCP, 22)), nullptr);

  auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::ACL_REJECT)], 3u);
  EXPECT_EQ(s.drops[size_t(DropReason::NO_ROUTE)], 1u);  // the permitted one, unrouted
  EXPECT_EQ(s.tx, 0u);  // the answers are packets the stage made, charged to no port
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  EXPECT_EQ(stage->icmp_responder().sent(), 2u);
  EXPECT_EQ(stage->rules()[0].count.packets, 3u);
}

TEST_F(Acl, ReplacingRulesKeepsTheCountsOfRulesThatStay) {
  Harness h;
  ASSERT_TRUE(h.build({stage("acl", lab_acl())}));
  auto* acl = h.pipeline->find<AclStage>("acl");
  h.run({pkt("10.0.0.1", "10.0.0.2", IPPROTO_TCP, 23), pkt("10.0.0.1", "10.0.0.2", IPPROTO_TCP, 23),
         pkt("198.51.100.9", "10.0.0.2", IPPROTO_UDP, 1500)});
  AclConfig next = lab_acl();
  next.rules[1].match.dst_port = config::PortRange{1000, 3000};  // "lab" changes: new count
  next.rules.push_back(rule("new", AclAction::Permit, {}));
  ASSERT_TRUE(acl->replace_rules(next));
  h.run({pkt("10.0.0.1", "10.0.0.2", IPPROTO_TCP, 23),
         pkt("198.51.100.9", "10.0.0.2", IPPROTO_UDP, 2500)});
  auto rules = acl->rules();
  ASSERT_EQ(rules.size(), 5u);
  EXPECT_EQ(rules[0].count.packets, 3u);  // kept: 2 before, 1 after
  EXPECT_EQ(rules[1].count.packets, 1u);  // changed: only what it matched since
  EXPECT_EQ(rules[3].count.packets, 0u);
  // A rule set that does not compile leaves the one in force.
  AclConfig broken = next;
  broken.rules[0].match.src = prefix("10.0.0.0/8");
  broken.rules[0].match.dst = prefix("2001:db8::/32");
  EXPECT_FALSE(acl->replace_rules(broken));
  EXPECT_EQ(acl->rules().size(), 5u);
}
