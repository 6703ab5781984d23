// Rule semantics: random rule sets (prefixes, exact ports and ranges, VLANs, L3, protocols,
// ingress ports, priorities with ties) against a plain reference matcher on random frames;
// the rule the XDP program counts must be the one the reference picks. And the atomic swap:
// rule sets replaced while frames run must never show a half-applied set.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "core/parse.h"
#include "harness.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// ---- the reference: the YAML's meaning, rule by rule ----

bool in_range(const std::optional<config::PortRange>& r, uint16_t net_port) {
  uint16_t p = ntohs(net_port);
  return p >= r->low && p <= r->high;
}

bool prefix_matches(const IpPrefix& pfx, const ParsedFrame& p, const uint32_t words[4]) {
  if (p.key.ip_version != pfx.addr.version) return false;
  IpAddress a;
  a.version = p.key.ip_version;
  std::memcpy(a.bytes.data(), words, a.version == 4 ? 4 : 16);
  return pfx.contains(a);
}

bool matches(const config::SteerMatch& m, std::string_view port, const ParsedFrame& p) {
  if (m.port && *m.port != port) return false;
  if (m.vlan && (!(p.flags & VF_PARSED_VLAN) || (p.vlan_tci & 0x0fff) != *m.vlan)) return false;
  if (m.inner_vlan && (p.vlan_count < 2 || (p.vlan_tci_inner & 0x0fff) != *m.inner_vlan))
    return false;
  if (m.l3) {
    bool ok = *m.l3 == config::L3Proto::Arp    ? p.eth_proto == 0x0806
              : *m.l3 == config::L3Proto::Ipv4 ? p.key.ip_version == 4
                                               : p.key.ip_version == 6;
    if (!ok) return false;
  }
  if (m.src && !prefix_matches(*m.src, p, p.key.src)) return false;
  if (m.dst && !prefix_matches(*m.dst, p, p.key.dst)) return false;
  if (m.l4_proto && (p.key.ip_version == 0 || p.key.l4_proto != *m.l4_proto)) return false;
  if ((m.src_port || m.dst_port) && !(p.flags & VF_PARSED_L4)) return false;
  if (m.src_port && !in_range(m.src_port, p.key.src_port)) return false;
  if (m.dst_port && !in_range(m.dst_port, p.key.dst_port)) return false;
  return true;
}

// Highest priority wins; equal priorities: the earlier rule. -1: the default.
int reference(const config::SteeringSection& s, std::string_view port, const ParsedFrame& p) {
  int best = -1;
  for (size_t i = 0; i < s.rules.size(); ++i) {
    if (!matches(s.rules[i].match, port, p)) continue;
    if (best < 0 || s.rules[i].priority > s.rules[size_t(best)].priority) best = int(i);
  }
  return best;
}

// ---- random rule sets and frames over small pools, so rules and frames meet often ----

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}

  bool chance(double p) { return std::uniform_real_distribution<>(0, 1)(rng_) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng_)];
  }
  uint32_t below(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_); }

  std::array<uint8_t, 4> v4() {
    return {10, uint8_t(below(3)), uint8_t(below(3)), uint8_t(below(4))};
  }
  std::array<uint8_t, 16> v6() {
    std::array<uint8_t, 16> a{0x20, 0x01, 0x0d, 0xb8};
    a[5] = uint8_t(below(3));
    a[7] = uint8_t(below(3));
    a[15] = uint8_t(below(4));
    return a;
  }
  IpPrefix prefix(int version) {
    IpPrefix p;
    p.addr.version = uint8_t(version);
    if (version == 4) {
      auto a = v4();
      std::copy(a.begin(), a.end(), p.addr.bytes.begin());
      p.length = uint8_t(pick(std::vector<int>{8, 16, 24, 32}));
    } else {
      auto a = v6();
      std::copy(a.begin(), a.end(), p.addr.bytes.begin());
      p.length = uint8_t(pick(std::vector<int>{32, 48, 64, 128}));
    }
    // Clear host bits, as the config loader insists.
    for (int bit = p.length; bit < (version == 4 ? 32 : 128); ++bit)
      p.addr.bytes[size_t(bit / 8)] &= uint8_t(~(0x80 >> (bit % 8)));
    return p;
  }
  uint16_t port() {
    return pick(std::vector<uint16_t>{22, 53, 80, 443, 1000, 1001, 1500, 4789, 5999, 40000});
  }
  config::PortRange port_range() {
    static const std::vector<config::PortRange> ranges = {
        {22, 22},  {53, 53},     {80, 80},      {443, 443},   {4789, 4789},
        {0, 1023}, {1000, 1003}, {1024, 65535}, {1000, 2000}, {5000, 5999}};
    return pick(ranges);
  }

  config::SteeringSection rules(size_t n) {
    config::SteeringSection s;
    s.default_action = {config::SteerActionKind::Userspace, {}};
    for (size_t i = 0; i < n; ++i) {
      config::SteerRule r;
      r.name = fmt::format("r{}", i);
      r.priority = below(3);
      auto& m = r.match;
      int version = chance(0.5) ? 4 : 6;
      bool ip_fields = false;
      if (chance(0.4)) {
        m.src = prefix(version);
        ip_fields = true;
      }
      if (chance(0.4)) {
        m.dst = prefix(version);
        ip_fields = true;
      }
      if (chance(0.5)) {
        m.l4_proto = pick(std::vector<uint8_t>{6, 17, 1, 132, 47});
        ip_fields = true;
        if (*m.l4_proto == 6 || *m.l4_proto == 17 || *m.l4_proto == 132) {
          if (chance(0.2)) m.src_port = port_range();
          if (chance(0.6)) m.dst_port = port_range();
        }
      }
      if (chance(0.2)) {
        m.l3 = ip_fields ? (version == 4 ? config::L3Proto::Ipv4 : config::L3Proto::Ipv6)
                         : pick(std::vector<config::L3Proto>{
                               config::L3Proto::Ipv4, config::L3Proto::Ipv6, config::L3Proto::Arp});
        if (*m.l3 == config::L3Proto::Ipv4 && !m.src && !m.dst) version = 4;
      }
      if (chance(0.1)) m.vlan = pick(std::vector<uint16_t>{10, 20});
      if (chance(0.1)) m.inner_vlan = pick(std::vector<uint16_t>{7, 8});
      if (chance(0.1)) m.port = pick(std::vector<std::string>{"wan", "lan"});
      r.action = {pick(std::vector<config::SteerActionKind>{
                      config::SteerActionKind::Pass, config::SteerActionKind::Drop,
                      config::SteerActionKind::Tx, config::SteerActionKind::Userspace}),
                  {}};
      s.rules.push_back(std::move(r));
    }
    return s;
  }

  Bytes frame() {
    FrameBuilder f;
    if (chance(0.2)) f.vlan(pick(std::vector<uint16_t>{10, 20, 30}), chance(0.5) ? 0x88a8 : 0x8100);
    // QinQ: a second tag inside the first.
    if (chance(0.2)) f.vlan(pick(std::vector<uint16_t>{7, 8, 9}));
    int kind = int(below(20));
    if (kind == 0) return f.arp().build();
    if (kind == 1) return f.ethertype(0x88cc).payload(20).build();
    uint8_t proto = pick(std::vector<uint8_t>{6, 17, 1, 132, 47});
    bool later = chance(0.05);
    if (kind < 11) {
      f.ipv4(v4(), v4(), proto, 0, later ? 0x0004 : 0);
    } else {
      f.ipv6(v6(), v6(), later ? 44 : proto);
      if (later) f.ext6(44, proto, 8, 3);
    }
    if (later) return f.payload(24).build();
    uint16_t sp = chance(0.5) ? port() : uint16_t(below(65536));
    uint16_t dp = chance(0.7) ? port() : uint16_t(below(65536));
    switch (proto) {
      case 6:
        f.tcp(sp, dp);
        break;
      case 17:
        f.udp(sp, dp);
        break;
      case 132:
        f.sctp(sp, dp);
        break;
      case 1:
        f.icmp();
        break;
      default:
        f.payload(8);
    }
    return f.build();
  }

 private:
  std::mt19937 rng_;
};

}  // namespace

TEST(SteerRules, RandomRuleSetsAgreeWithTheReference) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  Gen gen(20261130);
  constexpr int kSets = 40, kFrames = 250;
  int compiled = 0, frames = 0, rule_hits = 0;
  for (int set = 0; set < kSets; ++set) {
    auto rules = gen.rules(10 + gen.below(30));
    auto installed = h.install(rules);
    if (!installed) {
      // The only refusal allowed: more rule shapes than the program holds.
      EXPECT_NE(installed.error().message.find("distinct shapes"), std::string::npos)
          << installed.error().message;
      continue;
    }
    ++compiled;
    for (int i = 0; i < kFrames; ++i) {
      Bytes f = gen.frame();
      ParsedFrame p;
      ASSERT_EQ(parse_frame(f, p), std::nullopt);
      int want = reference(rules, kIngressPort, p);
      auto before = *h.program().counters();
      h.run(f);
      auto after = *h.program().counters();
      int got = -1;
      int moved = 0;
      for (size_t r = 0; r < after.rules.size(); ++r) {
        if (after.rules[r].packets != before.rules[r].packets) {
          got = int(r);
          ++moved;
        }
      }
      EXPECT_LE(moved, 1);
      EXPECT_EQ(after.default_hits - before.default_hits, got < 0 ? 1u : 0u);
      ASSERT_EQ(got, want) << "set " << set << " frame " << i << ": XDP chose "
                           << (got < 0 ? "the default" : rules.rules[size_t(got)].name)
                           << ", the reference "
                           << (want < 0 ? "the default" : rules.rules[size_t(want)].name);
      ++frames;
      if (want >= 0) ++rule_hits;
    }
  }
  EXPECT_EQ(compiled, kSets) << "every random rule set fits the classifier";
  EXPECT_GE(rule_hits, frames / 4) << "the frames exercise the rules, not only the default";
}

TEST(SteerRules, SwapUnderTrafficNeverShowsAHalfAppliedSet) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  // Two rule sets that both cover the traffic, through rules of different shapes, and drop
  // whatever they do not cover: a frame that met half of one and half of the other would
  // fall to the default and be dropped.
  auto make = [](bool first) {
    config::SteeringSection s;
    s.default_action = {config::SteerActionKind::Drop, {}};
    auto add = [&](config::SteerMatch m, config::SteerActionKind a) {
      config::SteerRule r;
      r.name = fmt::format("r{}", s.rules.size());
      r.match = std::move(m);
      r.action = {a, {}};
      s.rules.push_back(std::move(r));
    };
    // Filler rules of other shapes, so the sets differ in their tuples too.
    for (int i = 0; i < 250; ++i) {
      config::SteerMatch m;
      m.dst = *parse_ip_prefix(first ? fmt::format("172.16.{}.0/24", i)
                                     : fmt::format("172.17.{}.1/32", i));
      add(m, config::SteerActionKind::Drop);
    }
    config::SteerMatch m;
    if (first) {
      m.src = *parse_ip_prefix("192.0.2.0/24");
      add(m, config::SteerActionKind::Pass);
      m = {};
      m.src = *parse_ip_prefix("2001:db8:1::/64");
      add(m, config::SteerActionKind::Pass);
    } else {
      m.l4_proto = 17;
      m.dst_port = config::PortRange{9000, 9010};
      add(m, config::SteerActionKind::Tx);
    }
    return s;
  };
  auto a = make(true), b = make(false);
  ASSERT_TRUE(h.install(a));

  std::vector<Bytes> frames = {
      FrameBuilder().ipv4(ip4(192, 0, 2, 2), ip4(198, 51, 100, 2), 17).udp(1234, 9000).build(),
      FrameBuilder().ipv6(ip6("2001:db8:1::2"), ip6("2001:db8:2::2"), 17).udp(1, 9005).build()};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  std::thread traffic([&] {
    // Each run repeats a frame 64 times inside the kernel: a steady stream of classifications
    // while the main thread swaps.
    while (!stop.load()) {
      for (const auto& f : frames) {
        bpf_test_run_opts opts{};  // field by field, as in harness.h
        opts.sz = sizeof(opts);
        opts.data_in = f.data();
        opts.data_size_in = uint32_t(f.size());
        opts.repeat = 64;
        if (bpf_prog_test_run_opts(h.program().prog_fd(), &opts) == 0) sent += 64;
      }
    }
  });
  constexpr int kSwaps = 20;
  for (int i = 0; i < kSwaps; ++i)
    ASSERT_TRUE(h.install(i % 2 ? a : b));
  stop = true;
  traffic.join();

  auto c = *h.program().counters();
  EXPECT_EQ(c.rx_packets, sent.load());
  EXPECT_GT(c.rx_packets, 0u);
  EXPECT_EQ(c.default_hits, 0u) << "a frame met a half-applied set";
  EXPECT_EQ(c.verdict[VF_VERDICT_DROP], 0u);
  EXPECT_EQ(c.verdict[VF_VERDICT_PASS] + c.verdict[VF_VERDICT_TX], c.rx_packets);
  EXPECT_GT(c.verdict[VF_VERDICT_PASS], 0u);
  EXPECT_GT(c.verdict[VF_VERDICT_TX], 0u);
}
