#include "pipeline/acl/acl_stage.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/offload_feed.h"
#include "core/packet.h"
#include "pipeline/acl/acl_commands.h"
#include "pipeline/icmp_error.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

AclStage::AclStage(const config::StageConfig& cfg, StageContext& ctx)
    : Stage(cfg.type, cfg.name, ctx.lcore_slots),
      qsbr_(ctx.qsbr),
      offload_(ctx.offload),
      slots_(ctx.lcore_slots) {
  for (const PortInfo& p : ctx.ports)
    ports_.push_back(p.name);
}

Result<std::unique_ptr<AclStage>> AclStage::create(const config::StageConfig& cfg,
                                                   StageContext& ctx) {
  if (ctx.qsbr == nullptr) return fail("the acl stage needs the pipeline's grace-period domain");
  std::unique_ptr<AclStage> s(new AclStage(cfg, ctx));
  auto table = AclTable::build(cfg.params.get<AclConfig>(), ctx.lcore_slots, s->ports_);
  if (!table) return std::unexpected(table.error());
  s->table_.replace(std::move(*table), *ctx.qsbr);
  // Ready for `reject` rules whether or not the file has one yet: a reload may add them.
  auto responder = IcmpResponder::create(ctx);
  if (!responder) return std::unexpected(responder.error());
  s->icmp_responder_ = std::move(*responder);
  return s;
}

Result<void> AclStage::replace_rules(const AclConfig& acl) {
  auto table = AclTable::build(acl, slots_, ports_);
  if (!table) return std::unexpected(table.error());
  std::lock_guard lock(mutex_);
  AclTable* fresh = table->get();
  std::unique_ptr<AclTable> old = table_.exchange(std::move(*table), *qsbr_);
  // The old table is out of every worker's hands: its counts are final. The new table may
  // already count; its carried base is added on top of what it counted meanwhile.
  fresh->carry_over(*old);
  if (offload_) offload_->changed();
  return {};
}

std::vector<AclRuleReport> AclStage::rules() const {
  std::lock_guard lock(mutex_);
  const AclTable* t = table_.load();
  const auto& acl = t->config();
  std::vector<AclRuleReport> out;
  out.reserve(acl.rules.size() + 1);
  for (size_t i = 0; i < acl.rules.size(); ++i) {
    const auto& r = acl.rules[i];
    out.push_back(AclRuleReport{r.name, r.action, r.match, r.in_port, r.ct,
                                t->total(static_cast<uint32_t>(i + 1))});
  }
  out.push_back(AclRuleReport{"default", acl.default_action, {}, {}, {}, t->total(0)});
  return out;
}

namespace {

// The ingress port and the conntrack mark's bit (none: 0, which no `ct:` rule matches), in
// network order as rte_acl reads every field of a key.
template <typename Key>
void fill_context(const rte_mbuf* m, Key& k) noexcept {
  k.in_port = rte_cpu_to_be_16(m->port);
  const CtMark c = ct_mark(m);
  k.ct = rte_cpu_to_be_16(c == CtMark::None ? 0 : static_cast<uint16_t>(1u << unsigned(c)));
}

void fill_key(const rte_mbuf* m, AclKey4& k) noexcept {
  const rte_ipv4_hdr* ip = pkt::ipv4(m);
  k.proto = ip->next_proto_id;
  k.src = ip->src_addr;
  k.dst = ip->dst_addr;
  pkt::ports(m, k.src_port, k.dst_port);
  fill_context(m, k);
}

void fill_key(const rte_mbuf* m, AclKey6& k) noexcept {
  const rte_ipv6_hdr* ip = pkt::ipv6(m);
  k.proto = pkt::l4_proto(m);
  std::memcpy(k.src, ip->src_addr, 16);
  std::memcpy(k.dst, ip->dst_addr, 16);
  pkt::ports(m, k.src_port, k.dst_port);
  fill_context(m, k);
}

}  // namespace

size_t AclStage::describe(rte_mbuf* m, std::span<char> out) const noexcept {
  // The packet is classified again, alone: the batch's results are gone, and a traced packet
  // may pay for it.
  const AclTable* t = table_.load();
  uint32_t result = AclTable::kNoMatch;
  if (pkt::is_ipv4(m)) {
    AclKey4 k;
    fill_key(m, k);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&k);
    t->classify4(&p, &result, 1);
  } else if (pkt::is_ipv6(m)) {
    AclKey6 k;
    fill_key(m, k);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&k);
    t->classify6(&p, &result, 1);
  } else {
    return 0;
  }
  const auto& acl = t->config();
  const bool rule = result != AclTable::kNoMatch && result <= acl.rules.size();
  const std::string_view name = rule ? std::string_view(acl.rules[result - 1].name) : "default";
  const auto r =
      fmt::format_to_n(out.data(), out.size(), "{} {}", acl_action_name(t->action(result)), name);
  return std::min(out.size(), r.size);
}

void AclStage::set_port(PortId id, const PortInfo& info) {
  if (to_index(id) < ports_.size()) ports_[to_index(id)] = info.name;
  if (icmp_responder_) icmp_responder_->set_port(id, info);
}

void AclStage::process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept {
  AclTable* t = table_.load_mutable();
  const unsigned slot = env.slot();
  AclKey4 k4[kClassifyBatch];
  AclKey6 k6[kClassifyBatch];
  const uint8_t* p4[kClassifyBatch];
  const uint8_t* p6[kClassifyBatch];
  uint16_t at4[kClassifyBatch];
  uint16_t at6[kClassifyBatch];
  uint32_t r4[kClassifyBatch];
  uint32_t r6[kClassifyBatch];

  for (size_t base = 0; base < pkts.size(); base += kClassifyBatch) {
    const size_t end = std::min(pkts.size(), base + kClassifyBatch);
    uint32_t n4 = 0, n6 = 0;
    for (size_t i = base; i < end; ++i) {
      const rte_mbuf* m = pkts[i];
      if (pkt::is_ipv4(m)) {
        fill_key(m, k4[n4]);
        p4[n4] = reinterpret_cast<const uint8_t*>(&k4[n4]);
        at4[n4++] = static_cast<uint16_t>(i);
      } else if (pkt::is_ipv6(m)) {
        fill_key(m, k6[n6]);
        p6[n6] = reinterpret_cast<const uint8_t*>(&k6[n6]);
        at6[n6++] = static_cast<uint16_t>(i);
      }
    }
    if (n4) t->classify4(p4, r4, n4);
    if (n6) t->classify6(p6, r6, n6);
    for (uint32_t k = 0; k < n4 + n6; ++k) {
      const bool v6 = k >= n4;
      rte_mbuf* m = pkts[v6 ? at6[k - n4] : at4[k]];
      const uint32_t result = v6 ? r6[k - n4] : r4[k];
      t->count(slot, result, m->pkt_len);
      switch (t->action(result)) {
        case AclAction::Permit:
          break;
        case AclAction::Deny:
          set_drop(m, DropReason::ACL_DENY);
          break;
        case AclAction::Reject:
          if (!icmp_responder_->answer(m, v6, IcmpResponder::Kind::Prohibited,
                                       DropReason::ACL_REJECT, env, icmp4_admin_prohibited,
                                       icmp6_admin_prohibited))
            set_drop(m, DropReason::ACL_REJECT);
          break;
      }
    }
  }
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_acl_stage(const config::StageConfig& cfg, StageContext& ctx) {
  auto s = AclStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

// `ct: established` or `ct: [established, related]`.
void read_ct(config::Ctx& ctx, config::MapReader& r, std::vector<CtMark>& out) {
  const YAML::Node n = r.child("ct");
  if (!n.IsDefined()) return;
  const std::string path = r.key_path("ct");
  const auto one = [&](const YAML::Node& item, const std::string& at) {
    auto name = config::read_string(ctx, item, at);
    if (!name) return;
    if (auto c = ct_mark_from_name(*name)) {
      if (std::find(out.begin(), out.end(), *c) == out.end()) out.push_back(*c);
      return;
    }
    ctx.error(item, at, "'" + *name + "' is not one of new, established, related, invalid");
  };
  if (n.IsSequence()) {
    config::for_each_item(ctx, n, path, one);
    if (out.empty())
      ctx.error(n, path, "expected at least one of new, established, related, invalid");
  } else {
    one(n, path);
  }
}

AclConfig read_acl(config::Ctx& ctx, config::MapReader& m) {
  AclConfig s;
  m.get_enum<AclAction>(
      "default", s.default_action,
      {{"permit", AclAction::Permit}, {"deny", AclAction::Deny}, {"reject", AclAction::Reject}});
  config::for_each_item(ctx, m.child("rules"), m.key_path("rules"),
                        [&](const YAML::Node& item, const std::string& ip) {
                          config::MapReader r(ctx, item, ip,
                                              {"name", "action", "src", "dst", "proto", "src_port",
                                               "dst_port", "in_port", "ct"});
                          if (!r.ok()) return;
                          AclRule rule;
                          rule.where = ctx.at(item);
                          rule.name = fmt::format("acl{}", s.rules.size());
                          r.get("name", rule.name);
                          if (r.require("action")) {
                            r.get_enum<AclAction>("action", rule.action,
                                                  {{"permit", AclAction::Permit},
                                                   {"deny", AclAction::Deny},
                                                   {"reject", AclAction::Reject}});
                          }
                          config::read_five_tuple(r, rule.match);
                          std::string in_port;
                          if (r.get("in_port", in_port)) rule.in_port = in_port;
                          read_ct(ctx, r, rule.ct);
                          s.rules.push_back(std::move(rule));
                        });
  return s;
}

void check_acl(config::StageCheck& c, const AclConfig& a) {
  for (size_t ai = 0; ai < a.rules.size(); ++ai) {
    const auto& m = a.rules[ai].match;
    YAML::Node an = c.node({"rules", ai});
    std::string ap = c.path(fmt::format(".rules[{}]", ai));
    if (m.src && m.dst && m.src->addr.version != m.dst->addr.version) {
      c.error(an, ap, "src and dst are of different IP versions");
    }
    if ((m.src_port || m.dst_port) && !(m.l4_proto && config::has_ports(*m.l4_proto))) {
      c.error(an, ap, "src_port/dst_port need proto tcp, udp or sctp");
    }
    if (const auto& port = a.rules[ai].in_port)
      c.port_exists(*port, c.node({"rules", ai, "in_port"}), ap + ".in_port");
    if (!a.rules[ai].ct.empty()) {
      const auto& pipe = c.config().pipeline;
      const bool tracked = std::any_of(
          pipe.begin(), pipe.begin() + long(c.index()),
          [](const config::StageConfig& s) { return s.kind && s.kind->marks_connections; });
      if (!tracked)
        c.error(c.node({"rules", ai, "ct"}), ap + ".ct",
                "ct: needs a conntrack stage before this acl stage in the pipeline");
    }
  }
}

Json acl_json(const AclConfig& p) {
  Json rules = Json::array();
  for (const auto& r : p.rules) {
    Json j = {{"name", r.name}, {"action", acl_action_name(r.action)}};
    j.update(config::five_tuple_json(r.match));
    j["in_port"] = r.in_port ? Json(*r.in_port) : Json(nullptr);
    Json ct = Json::array();
    for (CtMark c : r.ct)
      ct.push_back(ct_mark_name(c));
    j["ct"] = r.ct.empty() ? Json(nullptr) : std::move(ct);
    rules.push_back(std::move(j));
  }
  return {{"default", acl_action_name(p.default_action)}, {"rules", std::move(rules)}};
}

Result<void> apply_rules(Stage& stage, const StageContext&, const config::AnyStageParams&,
                         const config::AnyStageParams& to) {
  return static_cast<AclStage&>(stage).replace_rules(to.get<AclConfig>());
}

}  // namespace

StageModule acl_stage_module() {
  return StageModule{
      config::stage_type<AclConfig>("acl", {"default", "rules"}, read_acl, acl_json, check_acl),
      make_acl_stage,
      nullptr,
      {{{"rules", "rule", "rules", [](const Json& r) { return r["name"].get<std::string>(); }},
        {"default", "", "", nullptr}},
       apply_rules,
       nullptr},
      control::add_acl_commands};
}

}  // namespace vecflow
