#include "steer/rules.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <numeric>

#include "vecflow/xdp_meta.h"

namespace vecflow::steer {
namespace {

using config::SteerActionKind;

template <typename T>
std::array<uint8_t, sizeof(T)> bytes_of(const T& v) {
  std::array<uint8_t, sizeof(T)> b;
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

Result<vf_rule_value> action_value(const config::SteerAction& a, uint32_t rank, uint32_t rule_id,
                                   const IfindexOf& ifindex_of, CompiledRules& out) {
  vf_rule_value v{};
  v.rank = rank;
  v.rule_id = rule_id;
  switch (a.kind) {
    case SteerActionKind::Pass:
      v.action = VF_ACT_PASS;
      break;
    case SteerActionKind::Drop:
      v.action = VF_ACT_DROP;
      break;
    case SteerActionKind::Userspace:
      v.action = VF_ACT_USERSPACE;
      break;
    case SteerActionKind::Tx:
      v.action = VF_ACT_TX;
      break;
    case SteerActionKind::Redirect: {
      auto ifindex = ifindex_of(a.redirect_port);
      if (!ifindex) return std::unexpected(ifindex.error());
      v.action = VF_ACT_REDIRECT;
      v.ifindex = *ifindex;
      auto& t = out.redirect_ifindexes;
      if (std::find(t.begin(), t.end(), *ifindex) == t.end()) t.push_back(*ifindex);
      break;
    }
  }
  return v;
}

// Network-order masks and values of a prefix over four words.
void prefix_words(const IpPrefix& p, uint32_t value[4], uint32_t mask[4]) {
  uint8_t bytes[16] = {};
  std::memcpy(bytes, p.addr.bytes.data(), p.addr.version == 4 ? 4 : 16);
  std::memcpy(value, bytes, 16);
  for (int w = 0; w < 4; ++w) {
    int bits = std::clamp(int(p.length) - 32 * w, 0, 32);
    mask[w] = bits == 0 ? 0 : htonl(~0u << (32 - bits));
    if (p.addr.version == 4 && w > 0) mask[w] = 0;
    value[w] &= mask[w];
  }
}

uint8_t l3_code(config::L3Proto l3) {
  switch (l3) {
    case config::L3Proto::Ipv4:
      return VF_L3_IPV4;
    case config::L3Proto::Ipv6:
      return VF_L3_IPV6;
    case config::L3Proto::Arp:
      return VF_L3_ARP;
  }
  return VF_L3_OTHER;
}

// Ports as classes: 0..65535 cut at every bound of every range of one direction, so that a
// range is a run of classes and a frame's port is one array read away from its class.
struct PortClasses {
  std::vector<uint32_t> starts;  // first port of each class, ascending, starts[0] == 0

  explicit PortClasses(const std::vector<config::PortRange>& ranges) {
    starts.push_back(0);
    for (const auto& r : ranges) {
      starts.push_back(r.low);
      if (r.high < 65535) starts.push_back(uint32_t(r.high) + 1);
    }
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  }
  uint16_t of(uint32_t port) const {
    return uint16_t(std::upper_bound(starts.begin(), starts.end(), port) - starts.begin() - 1);
  }
  std::vector<uint16_t> table() const {
    std::vector<uint16_t> t(VF_PORTS);
    for (size_t c = 0; c < starts.size(); ++c) {
      uint32_t end = c + 1 < starts.size() ? starts[c + 1] : VF_PORTS;
      std::fill(t.begin() + starts[c], t.begin() + end, uint16_t(c));
    }
    return t;
  }
};

}  // namespace

Result<CompiledRules> compile_rules(const config::SteeringSection& steering,
                                    std::string_view ingress_port, const IfindexOf& ifindex_of,
                                    const RxQueuePlan& queues) {
  CompiledRules out;
  const auto& rules = steering.rules;
  out.rule_count = uint32_t(rules.size());

  // Rank: higher priority first, then earlier in the file; unique per rule.
  std::vector<uint32_t> order(rules.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return rules[a].priority > rules[b].priority; });
  std::vector<uint32_t> rank(rules.size());
  for (size_t pos = 0; pos < order.size(); ++pos)
    rank[order[pos]] = uint32_t(order.size() - pos);

  using KeyBytes = std::array<uint8_t, sizeof(vf_rule_key)>;
  using TupleBytes = std::array<uint8_t, sizeof(vf_tuple)>;
  struct TupleEntries {
    vf_tuple masks{};
    std::map<KeyBytes, vf_rule_value> best;
  };
  std::map<TupleBytes, TupleEntries> tuples;

  auto applies = [&](const config::SteerRule& r) {
    return !r.match.port || *r.match.port == ingress_port;
  };
  std::vector<config::PortRange> src_ranges, dst_ranges;
  for (const auto& r : rules) {
    if (!applies(r)) continue;
    if (r.match.src_port) src_ranges.push_back(*r.match.src_port);
    if (r.match.dst_port) dst_ranges.push_back(*r.match.dst_port);
  }
  const PortClasses src_classes(src_ranges), dst_classes(dst_ranges);
  out.port_class = {src_classes.table(), dst_classes.table()};

  for (uint32_t id = 0; id < rules.size(); ++id) {
    const auto& rule = rules[id];
    const auto& m = rule.match;
    if (!applies(rule)) continue;
    auto value = action_value(rule.action, rank[id], id, ifindex_of, out);
    if (!value) return std::unexpected(value.error());

    vf_tuple t{};
    vf_rule_key k{};
    if (m.l3) {
      t.l3_mask = 0xff;
      k.l3 = l3_code(*m.l3);
    }
    for (auto [pfx, val, mask] :
         {std::tuple{&m.src, k.src, t.src_mask}, std::tuple{&m.dst, k.dst, t.dst_mask}}) {
      if (!*pfx) continue;
      prefix_words(**pfx, val, mask);
      t.l3_mask = 0xff;
      k.l3 = (*pfx)->addr.version == 4 ? VF_L3_IPV4 : VF_L3_IPV6;
    }
    if (m.l4_proto) {
      t.proto_mask = 0xff;
      k.proto = *m.l4_proto;
      if (!t.l3_mask) {  // any IP version
        t.l3_mask = VF_L3_IP_BIT;
        k.l3 = VF_L3_IP_BIT;
      }
    }
    if (m.vlan) {
      t.vlan_mask = 0xffff;
      k.vlan = *m.vlan;
    }
    if (m.inner_vlan) {
      t.inner_vlan_mask = 0xffff;
      k.inner_vlan = *m.inner_vlan;
    }
    // The classes a range covers; a field the rule leaves open is one wildcard "class".
    auto class_run = [](const PortClasses& pc, const std::optional<config::PortRange>& r) {
      if (!r) return std::pair<uint32_t, uint32_t>{0, 0};
      return std::pair<uint32_t, uint32_t>{pc.of(r->low), pc.of(r->high)};
    };
    auto [s_lo, s_hi] = class_run(src_classes, m.src_port);
    auto [d_lo, d_hi] = class_run(dst_classes, m.dst_port);
    if (m.src_port || m.dst_port) {
      t.l4_mask = 1;
      k.l4 = 1;
    }
    t.src_port_mask = m.src_port ? 0xffff : 0;
    t.dst_port_mask = m.dst_port ? 0xffff : 0;
    auto& entries = tuples[bytes_of(t)];
    entries.masks = t;
    for (uint32_t sc = s_lo; sc <= s_hi; ++sc) {
      for (uint32_t dc = d_lo; dc <= d_hi; ++dc) {
        vf_rule_key kk = k;
        kk.src_port = uint16_t(sc);
        kk.dst_port = uint16_t(dc);
        auto [it, fresh] = entries.best.emplace(bytes_of(kk), *value);
        if (!fresh && it->second.rank < value->rank) it->second = *value;
      }
    }
  }

  if (tuples.size() > VF_STEER_MAX_TUPLES) {
    return fail(
        "steering: the rules for port '{}' use {} distinct shapes (combinations of matched "
        "fields and prefix lengths); the XDP classifier holds at most {}. Use fewer distinct "
        "prefix lengths",
        ingress_port, tuples.size(), VF_STEER_MAX_TUPLES);
  }

  // Tuples in order of their best rule, so the program can stop early.
  std::vector<TupleEntries*> sorted;
  for (auto& [bytes, te] : tuples) {
    te.masks.max_rank = 0;
    for (auto& [kb, v] : te.best)
      te.masks.max_rank = std::max(te.masks.max_rank, v.rank);
    sorted.push_back(&te);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const TupleEntries* a, const TupleEntries* b) {
    return a->masks.max_rank > b->masks.max_rank;
  });
  for (uint32_t i = 0; i < sorted.size(); ++i) {
    out.set.tuples[i] = sorted[i]->masks;
    for (auto& [kb, v] : sorted[i]->best) {
      vf_rule_key k;
      std::memcpy(&k, kb.data(), sizeof(k));
      k.set_tuple = i;
      out.entries.emplace_back(k, v);
    }
  }
  out.set.tuple_count = uint32_t(sorted.size());

  auto dflt = action_value(steering.default_action, 0, VF_NO_RULE, ifindex_of, out);
  if (!dflt) return std::unexpected(dflt.error());
  out.set.default_action = *dflt;
  auto malformed = action_value(steering.malformed, 0, VF_NO_RULE, ifindex_of, out);
  auto no_socket = action_value(steering.no_socket, 0, VF_NO_RULE, ifindex_of, out);
  if (!malformed) return std::unexpected(malformed.error());
  if (!no_socket) return std::unexpected(no_socket.error());
  out.set.malformed = *malformed;
  out.set.no_socket = *no_socket;
  out.set.symmetric_hash = steering.symmetric_hash ? 1 : 0;
  out.set.read_queues = queues.read;
  out.set.other_queues.rule_id = VF_NO_RULE;
  out.set.other_queues.action =
      queues.other == config::SteerActionKind::Drop ? VF_ACT_DROP : VF_ACT_PASS;
  return out;
}

static_assert(config::kMaxRxQueues == VF_STEER_MAX_QUEUES && VF_STEER_MAX_QUEUES <= 64,
              "RxQueuePlan::read has a bit per socket map entry");

RxQueuePlan RxQueuePlan::of(const config::AfXdpPort& port) {
  RxQueuePlan p;
  p.read = 0;
  for (const auto& r : port.queues) {
    for (unsigned q = r.first; q < unsigned{r.first} + r.count && q < VF_STEER_MAX_QUEUES; ++q)
      p.read |= uint64_t{1} << q;
  }
  p.other = port.other_queues.value_or(config::SteerActionKind::Pass);
  return p;
}

}  // namespace vecflow::steer
