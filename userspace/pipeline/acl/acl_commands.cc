#include "pipeline/acl/acl_commands.h"

#include <string>

#include <fmt/format.h>

#include "api/values.h"
#include "pipeline/acl/acl_stage.h"
#include "pipeline/stage_commands.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kAclPackets{"vecflow_acl_rule_packets_total",
                                      "Packets an ACL rule (or the default action) decided",
                                      MetricType::Counter,
                                      {"stage", "rule", "action"}};
inline const MetricFamily kAclBytes{"vecflow_acl_rule_bytes_total",
                                    "Bytes of the packets an ACL rule (or the default) decided",
                                    MetricType::Counter,
                                    {"stage", "rule", "action"}};

std::string range_text(const config::PortRange& r) {
  return r.low == r.high ? std::to_string(r.low) : fmt::format("{}-{}", r.low, r.high);
}

// "tcp src 10.0.0.0/8 dport 22", or "any".
std::string match_text(const config::FiveTupleMatch& m) {
  std::string out;
  auto part = [&out](std::string text) { out += out.empty() ? text : " " + text; };
  if (m.l4_proto) part(proto_name(*m.l4_proto));
  if (m.src) part("src " + m.src->to_string());
  if (m.dst) part("dst " + m.dst->to_string());
  if (m.src_port) part("sport " + range_text(*m.src_port));
  if (m.dst_port) part("dport " + range_text(*m.dst_port));
  return out.empty() ? "any" : out;
}

// An ACL rule's match: the 5-tuple's, then "in lan", "ct established,related".
std::string rule_text(const AclRuleReport& r) {
  std::string out = match_text(r.match);
  std::string more;
  if (r.in_port) more += " in " + *r.in_port;
  for (size_t i = 0; i < r.ct.size(); ++i)
    more += fmt::format("{}{}", i == 0 ? " ct " : ",", ct_mark_name(r.ct[i]));
  if (more.empty()) return out;
  return out == "any" ? more.substr(1) : out + more;
}

}  // namespace

void add_acl_commands(Registry& registry, Pipeline& pipeline) {
  registry.add_collector("acl", [&pipeline](Snapshot& s) {
    for (AclStage* st : pipeline.all<AclStage>()) {
      for (const AclRuleReport& r : st->rules()) {
        auto act = acl_action_name(r.action);
        s.add(kAclPackets, {st->name(), r.name, act}, r.count.packets);
        s.add(kAclBytes, {st->name(), r.name, act}, r.count.bytes);
      }
    }
  });
  (void)registry.add_command(
      Command{&kAclSpec,
              [&pipeline](const CommandContext& ctx) -> CommandResult {
                ArgReader a(ctx);
                auto only = a.string("stage");
                if (auto e = unknown_stage<AclStage>(pipeline, only, "acl"))
                  return std::unexpected(*e);
                const Snapshot& s = ctx.snapshot;
                Json rules = Json::array();
                for (AclStage* st : pipeline.all<AclStage>()) {
                  if (only && st->name() != *only) continue;
                  const std::string& n = st->name();
                  auto report = st->rules();
                  for (size_t i = 0; i < report.size(); ++i) {
                    const AclRuleReport& r = report[i];
                    bool is_default = i + 1 == report.size();
                    auto act = acl_action_name(r.action);
                    rules.push_back(
                        {{"stage", n},
                         {"rule", r.name},
                         {"position", is_default ? Json(nullptr) : Json(i + 1)},
                         {"action", act},
                         {"match", is_default ? "default" : rule_text(r)},
                         {"packets", s.count(kAclPackets, {n, r.name, act})},
                         {"bytes", s.count(kAclBytes, {n, r.name, act})},
                         {"pps", number_or_null(ctx.rates.rate(kAclPackets, {n, r.name, act}))}});
                  }
                }
                return Json{{"rules", std::move(rules)}};
              },
              View{{table("", "/rules",
                          {{"STAGE", "stage"},
                           {"#", "position"},
                           {"RULE", "rule"},
                           {"ACTION", "action"},
                           {"MATCH", "match"},
                           {"PACKETS", "packets", Unit::Count},
                           {"BYTES", "bytes", Unit::Bytes},
                           {"RATE", "pps", Unit::Pps}})}}});
}

}  // namespace vecflow::control
