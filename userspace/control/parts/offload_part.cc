#include "control/parts/offload_part.h"

#include <arpa/inet.h>

#include <string>

#include <fmt/format.h>

#include "api/families.h"
#include "control/command_specs.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kOffloadEntries{
    "vecflow_offload_entries",
    "Flows the XDP steering program forwards (offload entries)",
    MetricType::Gauge,
    {}};
inline const MetricFamily kOffloadOffers{
    "vecflow_offload_offers_total",
    "Flows the workers offered for offload after deciding one of their packets",
    MetricType::Counter,
    {}};
inline const MetricFamily kOffloadInstalled{
    "vecflow_offload_installed_total", "Offload entries installed", MetricType::Counter, {}};
inline const MetricFamily kOffloadRemoved{
    "vecflow_offload_removed_total",
    "Offload entries removed: idle, or flushed (a change of routes, neighbours, rules, links, "
    "a reload, a capture or trace)",
    MetricType::Counter,
    {"why"}};
inline const MetricFamily kOffloadGatesOpened{
    "vecflow_offload_gates_opened_total",
    "Offloaded flows XDP began to forward once none of their earlier packets was in user space",
    MetricType::Counter,
    {}};
inline const MetricFamily kOffloadRefused{"vecflow_offload_refused_total",
                                          "Offered flows not offloaded, by reason",
                                          MetricType::Counter,
                                          {"reason"}};

std::string address(const uint32_t* words, uint8_t version) {
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(version == 6 ? AF_INET6 : AF_INET, words, text, sizeof(text));
  return text;
}

// "udp 10.0.0.1:5000 > 10.0.1.1:53", as `flows` and `sessions` write a connection.
std::string flow_text(const vf_flow_key& k) {
  std::string proto = k.l4_proto == 6    ? "tcp"
                      : k.l4_proto == 17 ? "udp"
                      : k.l4_proto == 1 || k.l4_proto == 58
                          ? (k.ip_version == 6 ? "icmpv6" : "icmp")
                          : std::to_string(k.l4_proto);
  const bool v6 = k.ip_version == 6;
  auto end = [&](const uint32_t* a, uint16_t port_be) {
    std::string s = v6 ? "[" + address(a, 6) + "]" : address(a, 4);
    return port_be ? fmt::format("{}:{}", s, ntohs(port_be)) : s;
  };
  return fmt::format("{} {} > {}", proto, end(k.src, k.src_port), end(k.dst, k.dst_port));
}

std::string mac_text(const std::array<uint8_t, 6>& m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4],
                     m[5]);
}

// "src as 192.0.2.1:20001", "dst as 10.0.0.5:80", both, or "" without NAT.
std::string nat_text(const steer::OffloadAction& a, uint8_t version) {
  auto end = [&](const steer::NatRewrite& n) {
    const std::string addr = address(n.addr.data(), version);
    return (version == 6 ? "[" + addr + "]" : addr) + ":" + std::to_string(ntohs(n.port));
  };
  std::string out;
  if (a.snat) out = "src as " + end(*a.snat);
  if (a.dnat) out += (out.empty() ? "" : ", ") + std::string("dst as ") + end(*a.dnat);
  return out;
}

std::string port_name(const steer::FlowOffloader& o, uint16_t port) {
  return port < o.ports().size() ? o.ports()[port].name : std::to_string(port);
}

std::string state_of(const steer::FlowOffloader& o) {
  if (!o.settings().enabled) return "off";
  if (!o.blocker().empty()) return "blocked";
  if (o.paused()) return "paused";
  return "on";
}

Json offload_json(const steer::FlowOffloader& o) {
  const uint64_t now = steer::OffloadTable::now_ns();
  const auto& st = o.stats();
  Json flows = Json::array();
  for (const auto& f : o.flows()) {
    const uint64_t last = std::max(f.stats.last_seen_ns, f.installed_ns);
    flows.push_back({{"flow", flow_text(f.key.flow)},
                     {"in", port_name(o, f.in_port)},
                     {"out", port_name(o, f.out_port)},
                     {"next_hop_mac", mac_text(f.action.dst_mac)},
                     {"ttl", f.action.decrement_ttl ? "decrement" : "keep"},
                     {"gate", f.gate ? "closed" : "open"},
                     {"nat", nat_text(f.action, f.key.flow.ip_version)},
                     {"packets", f.stats.packets},
                     {"bytes", f.stats.bytes},
                     {"idle_ms", now > last ? (now - last) / 1'000'000u : 0},
                     {"age_ms", now > f.installed_ns ? (now - f.installed_ns) / 1'000'000u : 0}});
  }
  Json refused = Json::array();
  for (auto it = o.refusals().rbegin(); it != o.refusals().rend(); ++it) {
    refused.push_back({{"flow", flow_text(it->key)},
                       {"in", port_name(o, it->in_port)},
                       {"out", port_name(o, it->out_port)},
                       {"reason", steer::offload_refusal_name(it->reason)},
                       {"ago_ms", now > it->when_ns ? (now - it->when_ns) / 1'000'000u : 0}});
  }
  Json reasons = Json::array();
  for (size_t r = 0; r < steer::kOffloadRefusalCount; ++r) {
    reasons.push_back(
        {{"reason", steer::offload_refusal_name(static_cast<steer::OffloadRefusal>(r))},
         {"count", st.refused[r]}});
  }
  const auto feed = o.feed().stats();
  Json summary = {{"state", state_of(o)},
                  {"why", o.blocker()},
                  {"entries", o.flows().size()},
                  {"table_size", 0},
                  {"idle_timeout_ms", o.settings().idle_timeout_ms},
                  {"sweep_ms", o.settings().sweep_ms},
                  {"offers", st.offers},
                  {"offers_lost", feed.ring_full},
                  {"installed", st.installed},
                  {"idle_removed", st.idle_removed},
                  {"flushes", st.flushes},
                  {"flushed", st.flushed},
                  {"gates_opened", st.gates_opened},
                  {"gates_quiet", st.gates_quiet},
                  {"gates_forced", st.gates_forced},
                  {"removed_packets", st.removed_packets},
                  {"removed_bytes", st.removed_bytes}};
  for (const auto& p : o.ports()) {
    if (p.table) {
      summary["table_size"] = p.table->capacity();
      break;
    }
  }
  return Json{{"summary", std::move(summary)},
              {"flows", std::move(flows)},
              {"refused", std::move(refused)},
              {"refusals", std::move(reasons)}};
}

View offload_view() {
  return View{{fields("offload", "/summary",
                      {{"STATE", "state"},
                       {"WHY", "why"},
                       {"ENTRIES", "entries", Unit::Count},
                       {"TABLE SIZE", "table_size", Unit::Count},
                       {"IDLE TIMEOUT MS", "idle_timeout_ms", Unit::Count},
                       {"SWEEP MS", "sweep_ms", Unit::Count},
                       {"OFFERS", "offers", Unit::Count},
                       {"OFFERS LOST", "offers_lost", Unit::Count},
                       {"INSTALLED", "installed", Unit::Count},
                       {"IDLE REMOVED", "idle_removed", Unit::Count},
                       {"FLUSHES", "flushes", Unit::Count},
                       {"FLUSHED", "flushed", Unit::Count},
                       {"GATES OPENED", "gates_opened", Unit::Count},
                       {"GATES QUIET", "gates_quiet", Unit::Count},
                       {"GATES FORCED", "gates_forced", Unit::Count}}),
               table("flows", "/flows",
                     {{"FLOW", "flow"},
                      {"IN", "in"},
                      {"OUT", "out"},
                      {"NEXT HOP MAC", "next_hop_mac"},
                      {"TTL", "ttl"},
                      {"GATE", "gate"},
                      {"NAT", "nat"},
                      {"PACKETS", "packets", Unit::Count},
                      {"BYTES", "bytes", Unit::Bytes},
                      {"IDLE MS", "idle_ms", Unit::Count}}),
               table("refused (latest first)", "/refused",
                     {{"FLOW", "flow"},
                      {"IN", "in"},
                      {"OUT", "out"},
                      {"REASON", "reason"},
                      {"AGO MS", "ago_ms", Unit::Count}}),
               table("refusals", "/refusals",
                     {{"REASON", "reason"}, {"COUNT", "count", Unit::Count}}, "/count")}};
}

}  // namespace

void register_offload(Registry& registry, Reloader& reloader, steer::FlowOffloader& offloader) {
  registry.add_collector("offload", [&offloader](Snapshot& s) {
    const auto& st = offloader.stats();
    s.set(kOffloadEntries, {}, double(offloader.flows().size()));
    s.add(kOffloadOffers, {}, st.offers);
    s.add(kOffloadInstalled, {}, st.installed);
    s.add(kOffloadRemoved, {"idle"}, st.idle_removed);
    s.add(kOffloadRemoved, {"flushed"}, st.flushed);
    s.add(kOffloadGatesOpened, {}, st.gates_opened);
    for (size_t r = 0; r < steer::kOffloadRefusalCount; ++r)
      s.add(kOffloadRefused, {steer::offload_refusal_name(static_cast<steer::OffloadRefusal>(r))},
            st.refused[r]);
  });
  (void)registry.add_command(Command{
      &kOffloadSpec,
      [&offloader](const CommandContext&) -> CommandResult { return offload_json(offloader); },
      offload_view()});
  reloader.add_section(
      "offload",
      {[](const config::ApplianceConfig& running, const config::ApplianceConfig& next) {
         std::vector<std::string> reasons;
         if (running.offload.table_size != next.offload.table_size)
           reasons.push_back(
               "offload.table_size: the XDP tables are sized when the steering programs load");
         return reasons;
       },
       [&offloader](const config::ApplianceConfig& next) -> Result<void> {
         offloader.configure(steer::offload_settings(next.offload));
         return {};
       }});
  // Whatever a reload changed (rules, steering, ports' settings), the flows offloaded before
  // it are decided again.
  reloader.on_applied([&offloader] { offloader.flush("a reload applied"); });
}

}  // namespace vecflow::control
