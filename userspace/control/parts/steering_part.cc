#include "control/parts/steering_part.h"

#include <array>
#include <string_view>

#include "api/counter_table.h"
#include "api/families.h"
#include "control/command_specs.h"
#include "core/drop_reason.h"

namespace vecflow::control {
namespace {

// Names of the program's actions and verdicts, in steer_abi.h order. A verdict is the action
// that took effect, plus `offload`: forwarded by an offload table entry, with no action chosen.
constexpr std::array<std::string_view, VF_ACT_COUNT> kActions = {"pass", "drop", "userspace", "tx",
                                                                 "redirect"};
constexpr std::array<std::string_view, VF_VERDICT_COUNT> kVerdicts = {
    "pass", "drop", "userspace", "tx", "redirect", "offload"};
constexpr std::array<std::string_view, VF_OFFLOAD_DECLINE_COUNT> kDeclines = {
    "vlan", "ip_options", "fragment", "tcp_fin_rst", "ttl", "mtu", "no_target", "gated"};

inline const MetricFamily kSteerRxBytes{"vecflow_steer_rx_bytes_total",
                                        "Bytes the XDP steering program saw on a port's interface",
                                        MetricType::Counter,
                                        {"port"}};
inline const MetricFamily kActionCount{
    "vecflow_steer_actions_total",
    "Action chosen for each frame by a rule, the default or the malformed policy",
    MetricType::Counter,
    {"port", "action"}};
inline const MetricFamily kOffloadBytes{
    "vecflow_steer_offload_bytes_total",
    "Bytes the XDP program forwarded by offload table entries (verdict offload)",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kOffloadDeclined{
    "vecflow_steer_offload_declined_total",
    "Frames of an offloaded flow the XDP program sent the normal way, by reason",
    MetricType::Counter,
    {"port", "reason"}};
inline const MetricFamily kDefaultHits{"vecflow_steer_default_hits_total",
                                       "Well-formed frames no steering rule matched",
                                       MetricType::Counter,
                                       {"port"}};
inline const MetricFamily kNoSocket{
    "vecflow_steer_no_socket_fallbacks_total",
    "Frames for user space with no AF_XDP socket on their queue (steering.no_socket applied)",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kQueueNotRead{
    "vecflow_steer_queue_not_read_total",
    "Frames for user space on an rx queue the port does not read (other_queues applied)",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kMtuLifted{
    "vecflow_steer_mtu_lifted_total",
    "Frames a tx or redirect rule sent to user space instead: over the target interface's MTU",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kMetaUnavailable{
    "vecflow_steer_meta_unavailable_total",
    "Frames lifted without XDP metadata (the driver gave no headroom, or the kernel refuses it)",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kXmitDrops{
    "vecflow_steer_xmit_drops_total",
    "Frames XDP redirected to a port's interface (offloaded or by a rule) that the kernel lost",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kUnconfigured{"vecflow_steer_unconfigured_total",
                                        "Frames passed because the program had no rule set yet",
                                        MetricType::Counter,
                                        {"port"}};
inline const MetricFamily kParseErrors{"vecflow_steer_parse_errors_total",
                                       "Frames the XDP parser rejected, by reason",
                                       MetricType::Counter,
                                       {"port", "reason"}};
inline const MetricFamily kRuleHits{
    "vecflow_steer_rule_hits_total",
    "Frames a steering rule matched (from its first match on the port)",
    MetricType::Counter,
    {"port", "rule"}};
inline const MetricFamily kRuleBytes{
    "vecflow_steer_rule_bytes_total",
    "Bytes of the frames a steering rule matched (from its first match on the port)",
    MetricType::Counter,
    {"port", "rule"}};

// The program's counters of a port under {port}. What it counts per verdict, action and drop
// reason and per rule (arrays, and the rule list) is collected in loops in collect_steering.
constexpr auto kSteerCounters = std::to_array<CounterField<steer::SteerCounters, uint64_t>>({
    {"rx_packets", &kSteerRxPackets, &steer::SteerCounters::rx_packets},
    {"rx_bytes", &kSteerRxBytes, &steer::SteerCounters::rx_bytes},
    {"default_hits", &kDefaultHits, &steer::SteerCounters::default_hits},
    {"no_socket_fallbacks", &kNoSocket, &steer::SteerCounters::no_socket_fallback},
    {"queue_not_read", &kQueueNotRead, &steer::SteerCounters::queue_not_read},
    {"mtu_lifted", &kMtuLifted, &steer::SteerCounters::mtu_lifted},
    {"meta_unavailable", &kMetaUnavailable, &steer::SteerCounters::meta_unavailable},
    {"unconfigured", &kUnconfigured, &steer::SteerCounters::unconfigured},
    {"offload_bytes", &kOffloadBytes, &steer::SteerCounters::offload_bytes},
    {"xmit_drops", &kXmitDrops, &steer::SteerCounters::xmit_drops},
});
static_assert(covers_struct(kSteerCounters, sizeof(steer::SteerCounters::verdict) +
                                                sizeof(steer::SteerCounters::action) +
                                                sizeof(steer::SteerCounters::malformed) +
                                                sizeof(steer::SteerCounters::drop) +
                                                sizeof(steer::SteerCounters::offload_declined) +
                                                sizeof(steer::SteerCounters::rules)));

Json rate_or_null(const RateWindow& rates, const MetricFamily& f, LabelMatch match) {
  auto r = rates.rate_sum(f, match);
  return r ? Json(*r) : Json(nullptr);
}

const char* state_name(steer::SteerInterface::State s) {
  switch (s) {
    case steer::SteerInterface::State::Attached:
      return "attached";
    case steer::SteerInterface::State::Missing:
      return "missing";
    case steer::SteerInterface::State::Replaced:
      return "replaced";
  }
  return "unknown";
}

// How the program is attached to an interface, in `status` and `steering`.
const char* attach_name(const steer::SteerInterface& itf) {
  return itf.adopted ? "dpdk net_af_xdp" : itf.dispatcher ? "libxdp dispatcher" : "single program";
}

void collect_steering(Snapshot& s, const steer::XdpSteering& steering,
                      const config::ApplianceConfig& running) {
  for (const auto& itf : steering.interfaces()) {
    auto c = steering.counters(itf.port);
    if (!c) continue;  // the interface went away: nothing to read, nothing to invent
    const std::string& port = itf.port;
    add_counters(s, kSteerCounters, *c, {port});
    for (size_t i = 0; i < VF_VERDICT_COUNT; ++i)
      s.add(kSteerVerdicts, {port, kVerdicts[i]}, c->verdict[i]);
    for (size_t i = 0; i < VF_ACT_COUNT; ++i)
      s.add(kActionCount, {port, kActions[i]}, c->action[i]);
    for (size_t i = 0; i < VF_OFFLOAD_DECLINE_COUNT; ++i)
      s.add(kOffloadDeclined, {port, kDeclines[i]}, c->offload_declined[i]);
    for (size_t r = 0; r < kDropReasonCount; ++r) {
      const auto dr = static_cast<DropReason>(r);
      auto reason = drop_reason_name(dr);
      if (c->malformed[r] || is_parse_fault(dr))
        s.add(kParseErrors, {port, reason}, c->malformed[r]);
      if (c->drop[r] || drop_possible(DropLayer::Xdp, dr))
        s.add(kDrops, {port, reason, "xdp"}, c->drop[r]);
    }
    // Rule ids index the steering section's rules of the set installed last. A rule that
    // has not matched on a port has no series there: a block list of 100k rules would
    // otherwise cost 400k series every sample and scrape, nearly all zero. (Rates treat
    // a series that appears as having been 0.)
    const auto& rules = running.steering.rules;
    for (size_t id = 0; id < c->rules.size() && id < rules.size(); ++id) {
      if (c->rules[id].packets == 0) continue;
      s.add(kRuleHits, {port, rules[id].name}, c->rules[id].packets);
      s.add(kRuleBytes, {port, rules[id].name}, c->rules[id].bytes);
    }
  }
}

// Per interface: how the program is attached and the frames it saw, by verdict.
Json interface_rows(const Snapshot& s, const RateWindow& rates,
                    const steer::XdpSteering& steering) {
  Json ports = Json::array();
  for (const auto& itf : steering.interfaces()) {
    const std::string& p = itf.port;
    Json row = {{"port", p},
                {"interface", itf.interface},
                {"attach", attach_name(itf)},
                {"mode", itf.generic ? "generic" : "native"},
                {"state", state_name(itf.state)},
                {"detaches", itf.detaches},
                {"reattaches", itf.reattaches}};
    add_counters_json(row, s, kSteerCounters, {p});
    row["rx_pps"] = rate_or_null(rates, kSteerRxPackets, {{"port", p}});
    auto bytes_rate = rates.rate(kSteerRxBytes, {p});
    row["rx_bps"] = bytes_rate ? Json(*bytes_rate * 8) : Json(nullptr);
    for (auto v : kVerdicts)
      row[std::string(v)] = s.count(kSteerVerdicts, {p, v});
    ports.push_back(std::move(row));
  }
  return ports;
}

// Per rule of the running configuration, summed over ports: one pass over each family, not
// one per rule.
Json rule_rows(const Snapshot& s, const RateWindow& rates, const config::ApplianceConfig& running) {
  const auto hits = s.sum_by(kRuleHits, "rule");
  const auto bytes = s.sum_by(kRuleBytes, "rule");
  const auto hit_rates = rates.rate_by(kRuleHits, "rule");
  auto value_or = [](const auto& map, const std::string& key, auto fallback) {
    auto it = map.find(key);
    return it == map.end() ? fallback : it->second;
  };
  Json rules = Json::array();
  for (const auto& r : running.steering.rules) {
    Json action = r.action.kind == config::SteerActionKind::Redirect
                      ? Json("redirect " + r.action.redirect_port)
                      : Json(config::to_string(r.action.kind));
    rules.push_back({{"rule", r.name},
                     {"priority", r.priority},
                     {"action", action},
                     {"packets", static_cast<uint64_t>(value_or(hits, r.name, 0.0))},
                     {"bytes", static_cast<uint64_t>(value_or(bytes, r.name, 0.0))},
                     {"pps", [&] {
                        auto rate = value_or(hit_rates, r.name, std::optional<double>(0.0));
                        return rates.ready() && rate ? Json(*rate) : Json(nullptr);
                      }()}});
  }
  return rules;
}

View steering_view() {
  return View{
      {table("interfaces", "/ports",
             {{"PORT", "port"},
              {"INTERFACE", "interface"},
              {"XDP", "attach"},
              {"MODE", "mode"},
              {"STATE", "state"},
              {"REATTACHED", "reattaches", Unit::Count},
              {"RX", "rx_packets", Unit::Count},
              {"RX RATE", "rx_pps", Unit::Pps},
              {"PASS", "pass", Unit::Count},
              {"DROP", "drop", Unit::Count},
              {"USERSPACE", "userspace", Unit::Count},
              {"TX", "tx", Unit::Count},
              {"REDIRECT", "redirect", Unit::Count},
              {"OFFLOAD", "offload", Unit::Count},
              {"XMIT DROPS", "xmit_drops", Unit::Count},
              {"NO SOCKET", "no_socket_fallbacks", Unit::Count},
              {"QUEUE NOT READ", "queue_not_read", Unit::Count},
              {"OVER MTU", "mtu_lifted", Unit::Count}}),
       table("rules", "/rules",
             {{"RULE", "rule"},
              {"PRIO", "priority"},
              {"ACTION", "action"},
              {"HITS", "packets", Unit::Count},
              {"BYTES", "bytes", Unit::Bytes},
              {"RATE", "pps", Unit::Pps}}),
       table("actions", "/actions",
             {{"ACTION", "action"}, {"COUNT", "count", Unit::Count}, {"RATE", "pps", Unit::Pps}}),
       table("parse errors", "/parse_errors",
             {{"REASON", "reason"}, {"COUNT", "count", Unit::Count}}, "/count")}};
}

// `steering`: per interface, per rule and per action counts and rates, parse errors.
void register_steering_command(Registry& registry, const steer::XdpSteering& steering,
                               const config::ApplianceConfig& running) {
  (void)registry.add_command(Command{
      &kSteeringSpec,
      [&steering, &running](const CommandContext& ctx) -> CommandResult {
        const Snapshot& s = ctx.snapshot;
        const RateWindow& rates = ctx.rates;
        Json actions = Json::array();
        for (auto v : kActions) {
          actions.push_back({{"action", v},
                             {"count", static_cast<uint64_t>(s.sum(kActionCount, {{"action", v}}))},
                             {"pps", rate_or_null(rates, kActionCount, {{"action", v}})}});
        }
        Json parse = Json::array();
        for (size_t r = 0; r < kDropReasonCount; ++r) {
          std::string name(drop_reason_name(static_cast<DropReason>(r)));
          parse.push_back(
              {{"reason", name},
               {"count", static_cast<uint64_t>(s.sum(kParseErrors, {{"reason", name}}))}});
        }
        return Json{{"interval_s", rates.interval_s()},
                    {"default", config::to_string(running.steering.default_action.kind)},
                    {"ports", interface_rows(s, rates, steering)},
                    {"rules", rule_rows(s, rates, running)},
                    {"actions", std::move(actions)},
                    {"parse_errors", std::move(parse)}};
      },
      steering_view()});
}

}  // namespace

std::vector<CounterTableInfo> steering_counter_tables() {
  return {describe("steer::SteerCounters", kSteerCounters)};
}

void register_steering(Registry& registry, Reloader& reloader, steer::XdpSteering& steering,
                       const config::ApplianceConfig& running) {
  registry.add_collector(
      "steering", [&steering, &running](Snapshot& s) { collect_steering(s, steering, running); });

  registry.add_status("steering", [&steering](const CommandContext&) {
    Json rows = Json::array();
    for (const auto& itf : steering.interfaces()) {
      rows.push_back({{"port", itf.port},
                      {"interface", itf.interface},
                      {"prog_id", itf.prog_id},
                      {"attach", attach_name(itf)},
                      {"mode", itf.generic ? "generic" : "native"},
                      {"state", state_name(itf.state)},
                      {"detaches", itf.detaches},
                      {"reattaches", itf.reattaches}});
    }
    return rows;
  });

  register_steering_command(registry, steering, running);

  // Rule sets are swapped atomically per interface (SteerProgram::install); what decides the
  // interfaces (the ports section) is not part of this section.
  reloader.add_section("steering", {nullptr, [&steering](const config::ApplianceConfig& next) {
                                      return steering.replace_rules(next.steering);
                                    }});
}

}  // namespace vecflow::control
