// The conntrack stage type in the appliance file (its keys, reader, checks and JSON), its
// factory and the reload of its NAT rules.
#include "pipeline/conntrack/conntrack_stage.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <unistd.h>

#include <fmt/format.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <nlohmann/json.hpp>

#include "core/flow.h"
#include "core/log.h"
#include "core/packet.h"
#include "pipeline/conntrack/conntrack_commands.h"
#include "pipeline/ip_util.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

Result<std::unique_ptr<ConntrackStage>> ConntrackStage::create(const config::StageConfig& cfg,
                                                               StageContext& ctx) {
  const auto& p = cfg.params.get<ConntrackConfig>();
  if (p.max_sessions == 0) return fail("conntrack: max_sessions must be at least 1");
  // The table is reserved and touched at start: a size the machine cannot hold is refused
  // here, named, rather than ending the process when the kernel runs out of memory.
  const size_t need = ConnTable::memory_for(p.max_sessions);
  const size_t ram = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGE_SIZE));
  if (need > ram / 2)
    return fail(
        "conntrack: max_sessions {} needs {} MiB of session table, more than half of "
        "this machine's {} MiB",
        p.max_sessions, need >> 20, ram >> 20);
  std::unique_ptr<ConntrackStage> s;
  try {
    s.reset(new ConntrackStage(cfg, ctx));
  } catch (const std::bad_alloc&) {
    return fail("conntrack: cannot map {} MiB for {} sessions", need >> 20, p.max_sessions);
  }
  if (auto r = s->masquerade_ports(p); !r) return std::unexpected(r.error());
  if (auto r = s->replace_vrfs(ctx.vrfs); !r) return std::unexpected(r.error());
  ctx.session_vrfs = true;  // whether or not there are VRFs yet: a reload may add them
  return s;
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_conntrack_stage(const config::StageConfig& cfg,
                                                    StageContext& ctx) {
  auto s = ConntrackStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

// The timeouts: key, member.
struct TimeoutKey {
  std::string_view key;
  uint32_t ConnTimeouts::*field;
};
constexpr TimeoutKey kTimeoutKeys[] = {
    {"tcp_syn_sent", &ConnTimeouts::tcp_syn_sent},
    {"tcp_syn_recv", &ConnTimeouts::tcp_syn_recv},
    {"tcp_established", &ConnTimeouts::tcp_established},
    {"tcp_fin_wait", &ConnTimeouts::tcp_fin_wait},
    {"tcp_time_wait", &ConnTimeouts::tcp_time_wait},
    {"tcp_close", &ConnTimeouts::tcp_close},
    {"udp_unreplied", &ConnTimeouts::udp_unreplied},
    {"udp_assured", &ConnTimeouts::udp_assured},
    {"icmp", &ConnTimeouts::icmp},
    {"other_unreplied", &ConnTimeouts::other_unreplied},
    {"other_replied", &ConnTimeouts::other_replied},
};

// An IPv4 address; IPv6 is refused by name (the NAT is NAT44).
void get_v4(config::Ctx& ctx, config::MapReader& m, std::string_view key, IpAddress& out) {
  std::optional<IpAddress> a;
  if (!m.get_address(key, a)) return;
  if (a->version != 4) {
    ctx.error(m.child(key), m.key_path(key), "NAT translates IPv4 only (NAT44)");
    return;
  }
  out = *a;
}

// `to`: an IPv4 address or prefix, or a list of them.
void read_pool(config::Ctx& ctx, const YAML::Node& n, const std::string& path,
               std::vector<IpPrefix>& out) {
  const auto one = [&](const YAML::Node& item, const std::string& at) {
    const auto text = config::read_string(ctx, item, at);
    if (!text) return;
    std::string why;
    std::optional<IpPrefix> p;
    if (text->find('/') == std::string::npos) {
      if (const auto a = parse_ip_address(*text))
        p = IpPrefix{*a, static_cast<uint8_t>(a->version == 4 ? 32 : 128)};
      else
        why = "not an IPv4 address or prefix";
    } else {
      p = parse_ip_prefix(*text, &why);
    }
    if (!p)
      ctx.error(item, at, fmt::format("invalid pool address '{}': {}", *text, why));
    else if (p->addr.version != 4)
      ctx.error(item, at, "NAT translates IPv4 only (NAT44)");
    else
      out.push_back(*p);
  };
  if (n.IsSequence()) {
    config::for_each_item(ctx, n, path, one);
    if (n.size() == 0) ctx.error(n, path, "an empty pool");
  } else {
    one(n, path);
  }
}

void read_nat(config::Ctx& ctx, config::MapReader& m, ConntrackConfig& c) {
  config::MapReader n(ctx, m.child("nat"), m.key_path("nat"), {"snat", "dnat"});
  if (!n.ok()) return;
  config::for_each_item(
      ctx, n.child("snat"), n.key_path("snat"),
      [&](const YAML::Node& item, const std::string& path) {
        config::MapReader r(ctx, item, path, {"in_port", "src", "to", "masquerade", "ports"});
        if (!r.ok()) return;
        SnatRuleConfig s;
        r.get("in_port", s.in_port);
        if (r.get_prefix("src", s.src) && s.src->addr.version != 4) {
          ctx.error(r.child("src"), r.key_path("src"), "NAT translates IPv4 only (NAT44)");
          s.src.reset();
        }
        r.get("masquerade", s.masquerade);
        if (r.has("to") == !s.masquerade.empty())
          ctx.error(item, path,
                    "give `to` (pool addresses) or `masquerade` (a port whose address to "
                    "take), one of them");
        else if (r.has("to"))
          read_pool(ctx, r.child("to"), r.key_path("to"), s.to);
        std::optional<config::PortRange> ports;
        if (r.get_port_range("ports", ports)) {
          if (ports->low == 0)
            ctx.error(r.child("ports"), r.key_path("ports"), "port 0 cannot be a source port");
          else
            s.ports = *ports;
        }
        c.snat.push_back(std::move(s));
      });
  config::for_each_item(
      ctx, n.child("dnat"), n.key_path("dnat"),
      [&](const YAML::Node& item, const std::string& path) {
        config::MapReader r(ctx, item, path,
                            {"in_port", "proto", "dst", "dst_port", "to", "to_port"});
        if (!r.ok()) return;
        DnatRuleConfig d;
        r.get("in_port", d.in_port);
        r.get_enum<uint8_t>("proto", d.proto, {{"tcp", IPPROTO_TCP}, {"udp", IPPROTO_UDP}});
        if (r.require("dst")) get_v4(ctx, r, "dst", d.dst);
        if (r.require("dst_port")) r.get("dst_port", d.dst_port, 1, 65535);
        if (r.require("to")) get_v4(ctx, r, "to", d.to);
        d.to_port = d.dst_port;
        r.get("to_port", d.to_port, 1, 65535);
        c.dnat.push_back(std::move(d));
      });
}

ConntrackConfig read_conntrack(config::Ctx& ctx, config::MapReader& m) {
  ConntrackConfig c;
  if (m.has("nat")) read_nat(ctx, m, c);
  m.get("max_sessions", c.max_sessions, 1, ConnTable::kMaxSessions);
  m.get_enum<bool>("invalid", c.drop_invalid, {{"mark", false}, {"drop", true}});
  if (m.has("timeouts")) {
    std::vector<std::string_view> keys;
    for (const auto& t : kTimeoutKeys)
      keys.push_back(t.key);
    config::MapReader t(ctx, m.child("timeouts"), m.key_path("timeouts"), keys);
    if (t.ok()) {
      for (const auto& tk : kTimeoutKeys)
        t.get(std::string(tk.key), c.timeouts.*tk.field, 1, kMaxConnTimeout);
    }
  }
  return c;
}

const config::StageConfig* group_head(const config::ApplianceConfig& cfg, size_t i) {
  while (i > 0 && cfg.pipeline[i].fuse)
    --i;
  return &cfg.pipeline[i];
}

void check_nat(config::StageCheck& c, const ConntrackConfig& p) {
  const config::ApplianceConfig& cfg = c.config();
  for (size_t i = 0; i < cfg.pipeline.size(); ++i) {
    if (i == c.index() || cfg.pipeline[i].type != c.stage().type) continue;
    if (cfg.pipeline[i].params.get<ConntrackConfig>().nat() && i < c.index())
      c.error(c.node({"nat"}), c.path(".nat"),
              fmt::format("only one conntrack stage may translate; pipeline[{}] does already", i));
  }
  std::vector<uint32_t> pools;
  size_t masquerade = 0;
  for (size_t i = 0; i < p.snat.size(); ++i) {
    const SnatRuleConfig& r = p.snat[i];
    if (!r.in_port.empty())
      c.port_exists(r.in_port, c.node({"nat", "snat", i, "in_port"}),
                    c.path(fmt::format(".nat.snat[{}].in_port", i)));
    if (!r.masquerade.empty()) {
      c.port_exists(r.masquerade, c.node({"nat", "snat", i, "masquerade"}),
                    c.path(fmt::format(".nat.snat[{}].masquerade", i)));
      ++masquerade;
    }
    for (uint32_t a : nat_pool_addresses(r.to))
      if (std::find(pools.begin(), pools.end(), a) == pools.end()) pools.push_back(a);
  }
  if (pools.size() + masquerade > NatMap::kMaxPools)
    c.error(
        c.node({"nat", "snat"}), c.path(".nat.snat"),
        fmt::format("more than {} pool addresses (each address of a pool, one per masquerade rule)",
                    NatMap::kMaxPools));
  if (p.dnat.size() > 255)
    c.error(c.node({"nat", "dnat"}), c.path(".nat.dnat"),
            fmt::format("{} destination NAT rules; at most 255", p.dnat.size()));
  for (size_t i = 0; i < p.dnat.size(); ++i) {
    const DnatRuleConfig& r = p.dnat[i];
    const std::string at = fmt::format(".nat.dnat[{}]", i);
    if (!r.in_port.empty())
      c.port_exists(r.in_port, c.node({"nat", "dnat", i, "in_port"}), c.path(at + ".in_port"));
    for (size_t j = 0; j < i; ++j) {
      const DnatRuleConfig& o = p.dnat[j];
      if (o.proto == r.proto && o.dst == r.dst && o.dst_port == r.dst_port &&
          (o.in_port == r.in_port || o.in_port.empty() || r.in_port.empty()))
        c.error(c.node({"nat", "dnat", i}), c.path(at),
                fmt::format("forwards the same public endpoint {}:{} as dnat[{}]",
                            r.dst.to_string(), r.dst_port, j));
      if (o.proto == r.proto && o.to == r.to && o.to_port == r.to_port)
        c.error(c.node({"nat", "dnat", i}), c.path(at),
                fmt::format("has the same target {}:{} as dnat[{}]: replies could not tell "
                            "which public endpoint to leave from",
                            r.to.to_string(), r.to_port, j));
    }
  }
}

void check_conntrack(config::StageCheck& c, const ConntrackConfig& p) {
  const config::ApplianceConfig& cfg = c.config();
  const YAML::Node at = c.node();
  if (p.nat()) check_nat(c, p);
  if (group_head(cfg, c.index())->sched != SchedType::Atomic)
    c.error(at, c.path(),
            "conntrack keeps per-connection state and needs an atomic queue: give it "
            "`sched: atomic`, or fuse it to a stage that has it");
  if (cfg.scheduler.vector_size < 2)
    c.error(at, c.path(),
            "conntrack needs flow-bucketed vectors (scheduler.vector.size of 2 or more): its "
            "table is owned per flow bucket");
  if (!cfg.steering.symmetric_hash)
    c.error(at, c.path(),
            "conntrack needs steering.symmetric_hash: true, so that both directions of a "
            "connection share a flow bucket");
  const bool any_dpdk = std::any_of(
      cfg.ports.begin(), cfg.ports.end(),
      [](const config::PortConfig& p) { return std::holds_alternative<config::DpdkPort>(p.kind); });
  // A DPDK port takes its NIC's RSS hash unless flow_id is software (xdp means the XDP
  // program's hash, which only AF_XDP ports' frames carry; a vlan port's arrive on its afxdp
  // parent's queues, so carry it too).
  if (cfg.scheduler.flow_id == FlowIdSource::Rss ||
      (cfg.scheduler.flow_id != FlowIdSource::Software && any_dpdk))
    c.error(at, c.path(),
            "conntrack needs the flow hash vecflow computes (scheduler.flow_id: software, or xdp "
            "when every port is AF_XDP): a NIC's RSS hash differs between a connection's two "
            "directions");
}

Json conntrack_json(const ConntrackConfig& p) {
  Json t = Json::object();
  for (const auto& tk : kTimeoutKeys)
    t[std::string(tk.key)] = p.timeouts.*tk.field;
  Json snat = Json::array(), dnat = Json::array();
  for (const SnatRuleConfig& r : p.snat) {
    Json rule = {{"in_port", r.in_port.empty() ? Json() : Json(r.in_port)},
                 {"src", config::prefix_json(r.src)}};
    if (r.masquerade.empty()) {
      Json to = Json::array();
      for (const IpPrefix& a : r.to)
        to.push_back(a.length == 32 ? a.addr.to_string() : a.to_string());
      rule["to"] = to.size() == 1 ? to[0] : to;
    } else {
      rule["masquerade"] = r.masquerade;
    }
    rule["ports"] = config::port_range_json(r.ports);
    snat.push_back(std::move(rule));
  }
  for (const DnatRuleConfig& r : p.dnat)
    dnat.push_back({{"in_port", r.in_port.empty() ? Json() : Json(r.in_port)},
                    {"proto", config::l4_proto_json(r.proto)},
                    {"dst", r.dst.to_string()},
                    {"dst_port", r.dst_port},
                    {"to", r.to.to_string()},
                    {"to_port", r.to_port}});
  return {{"max_sessions", p.max_sessions},
          {"invalid", p.drop_invalid ? "drop" : "mark"},
          {"timeouts", std::move(t)},
          {"nat", {{"snat", std::move(snat)}, {"dnat", std::move(dnat)}}}};
}

// Source NAT rules are swapped live (new connections take the new rules; a session keeps the
// mapping it has until it expires, as Linux keeps its NAT bindings); the rest is a restart.
Result<void> apply_nat(Stage& stage, const StageContext& ctx, const config::AnyStageParams&,
                       const config::AnyStageParams& to) {
  return static_cast<ConntrackStage&>(stage).replace_nat(to.get<ConntrackConfig>(), ctx);
}

std::vector<std::pair<std::string, std::string>> nat_ports(const config::AnyStageParams& params) {
  const auto& c = params.get<ConntrackConfig>();
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < c.snat.size(); ++i) {
    if (!c.snat[i].in_port.empty())
      out.emplace_back(fmt::format("nat.snat[{}]", i), c.snat[i].in_port);
    if (!c.snat[i].masquerade.empty())
      out.emplace_back(fmt::format("nat.snat[{}]", i), c.snat[i].masquerade);
  }
  for (size_t i = 0; i < c.dnat.size(); ++i)
    if (!c.dnat[i].in_port.empty())
      out.emplace_back(fmt::format("nat.dnat[{}]", i), c.dnat[i].in_port);
  return out;
}

}  // namespace

StageModule conntrack_stage_module() {
  config::StageType type = config::stage_type<ConntrackConfig>(
      "conntrack", {"max_sessions", "invalid", "timeouts", "nat"}, read_conntrack, conntrack_json,
      check_conntrack);
  type.marks_connections = true;
  return StageModule{
      std::move(type),
      make_conntrack_stage,
      [](const config::AnyStageParams& p) { return p.get<ConntrackConfig>().masquerades(); },
      {{{"nat", "", "", nullptr}}, apply_nat, nat_ports},
      control::add_conntrack_commands};
}

}  // namespace vecflow
