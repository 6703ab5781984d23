#include "pipeline/route/route_commands.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/counter_table.h"
#include "api/values.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/stage_commands.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kRoutePackets{
    "vecflow_route_packets_total",
    "What a route stage did with packets: forwarded, to_kernel, no_route, ttl_expired, "
    "packet_too_big, not_ip, ipv4_bad_checksum, martian_source, martian_destination",
    MetricType::Counter,
    {"stage", "outcome"}};
inline const MetricFamily kRouteIcmp{"vecflow_route_icmp_sent_total",
                                     "ICMP errors a route stage sent (time exceeded, "
                                     "fragmentation needed, packet too big)",
                                     MetricType::Counter,
                                     {"stage"}};
inline const MetricFamily kRouteIcmpLimited{
    "vecflow_route_icmp_limited_total",
    "ICMP errors a route stage withheld for its rate (the packets were only dropped)",
    MetricType::Counter,
    {"stage"}};
// A route stage's counters under {stage}: its outcomes (the key is the outcome label), in the
// order `routes` shows them, then its ICMP errors.
constexpr auto kRouteCounters = std::to_array<CounterField<RouteCounters, uint64_t>>({
    {"forwarded", &kRoutePackets, &RouteCounters::forwarded, "forwarded"},
    {"to_kernel", &kRoutePackets, &RouteCounters::to_kernel, "to_kernel"},
    {"no_route", &kRoutePackets, &RouteCounters::no_route, "no_route"},
    {"ttl_expired", &kRoutePackets, &RouteCounters::ttl_expired, "ttl_expired"},
    {"packet_too_big", &kRoutePackets, &RouteCounters::too_big, "packet_too_big"},
    {"not_ip", &kRoutePackets, &RouteCounters::not_ip, "not_ip"},
    {"ipv4_bad_checksum", &kRoutePackets, &RouteCounters::bad_checksum, "ipv4_bad_checksum"},
    {"martian_source", &kRoutePackets, &RouteCounters::martian_source, "martian_source"},
    {"martian_destination", &kRoutePackets, &RouteCounters::martian_destination,
     "martian_destination"},
    {"icmp_sent", &kRouteIcmp, &RouteCounters::icmp_sent},
    {"icmp_limited", &kRouteIcmpLimited, &RouteCounters::icmp_limited},
});
static_assert(covers_struct(kRouteCounters));
inline const MetricFamily kRoutes{
    "vecflow_route_entries",
    "Routes a route stage has in force, by VRF and by where they came from",
    MetricType::Gauge,
    {"stage", "vrf", "source"}};

std::string_view route_action_name(RouteAction a) {
  switch (a) {
    case RouteAction::Forward:
    case RouteAction::Leak:  // a leaf's only; a route into a VRF forwards
      return "forward";
    case RouteAction::Kernel:
      return "kernel";
    case RouteAction::Drop:
      break;
  }
  return "drop";
}

// "via 192.0.2.254 dev wan", "dev lan" for a connected network, "vrf red" into another VRF.
std::string hop_text(const NextHop& h) {
  if (!h.vrf.empty()) return "vrf " + h.vrf;
  return h.via ? fmt::format("via {} dev {}", h.via->to_string(), h.port) : "dev " + h.port;
}

Json route_row(const std::string& stage, const RouteEntry& e) {
  Json hops = Json::array();
  for (const auto& h : e.route.nexthops)
    hops.push_back(hop_text(h));
  return Json{
      {"stage", stage},
      {"vrf", e.route.vrf.empty() ? std::string(config::kDefaultVrf) : e.route.vrf},
      {"prefix", e.route.prefix.to_string()},
      {"action", route_action_name(e.route.action)},
      {"nexthops", std::move(hops)},
      {"source", e.source == RouteSource::Kernel ? "kernel" : "config"},
      // Who installed a kernel route; none for the file's.
      {"protocol",
       e.source == RouteSource::Kernel ? Json(kernel_protocol_name(e.route.protocol)) : Json()}};
}

}  // namespace

std::vector<CounterTableInfo> route_counter_tables() {
  return {describe("RouteCounters", kRouteCounters)};
}

void add_route_commands(Registry& registry, Pipeline& pipeline) {
  registry.add_collector("route", [&pipeline](Snapshot& s) {
    for (RouteStage* st : pipeline.all<RouteStage>()) {
      const std::string& n = st->name();
      add_counters(s, kRouteCounters, st->counters(), {n});
      for (const auto& c : st->route_counts()) {
        s.set(kRoutes, {n, c.vrf, "config"}, static_cast<double>(c.config));
        s.set(kRoutes, {n, c.vrf, "kernel"}, static_cast<double>(c.kernel));
      }
    }
  });
  (void)registry.add_command(Command{
      &kRoutesSpec,
      [&pipeline](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        auto only = a.string("stage");
        auto lookup = a.string("lookup");
        auto vrf = a.string("vrf");
        if (auto e = unknown_stage<RouteStage>(pipeline, only, "route")) return std::unexpected(*e);
        std::optional<IpAddress> addr;
        if (lookup) {
          addr = parse_ip_address(*lookup);
          if (!addr) {
            return command_error(ErrorCode::BadArguments, "lookup: '{}' is not an IP address",
                                 *lookup);
          }
        }
        const Snapshot& s = ctx.snapshot;
        Json stages = Json::array();
        Json routes = Json::array();
        Json lookups = Json::array();
        // The default VRF is "" in a route, "default" to the operator.
        const std::string in_vrf = vrf && *vrf != config::kDefaultVrf ? *vrf : std::string();
        for (RouteStage* st : pipeline.all<RouteStage>()) {
          if (only && st->name() != *only) continue;
          const std::string& n = st->name();
          const std::vector<std::string> vrfs = st->vrf_names();
          if (vrf && std::ranges::find(vrfs, *vrf) == vrfs.end()) {
            return command_error(ErrorCode::BadArguments,
                                 "vrf: stage {} has no VRF '{}' (it has: {})", n, *vrf,
                                 fmt::join(vrfs, ", "));
          }
          Json row = {{"stage", n},
                      {"from_kernel", st->follows_kernel()},
                      {"icmp_time_exceeded", st->sends_icmp()},
                      {"icmp_unreachable", st->answers_unreachable()},
                      {"checks",
                       {{"ipv4_checksum", st->checks().ipv4_checksum},
                        {"martians", st->checks().martians}}}};
          add_counters_json(row, s, kRouteCounters, {n});
          auto entries = st->routes();
          row["routes"] = entries.size();
          row["vrfs"] = vrfs.size();
          stages.push_back(std::move(row));
          for (const auto& e : entries) {
            if (!vrf || e.route.vrf == in_vrf) routes.push_back(route_row(n, e));
          }
          if (addr) {
            auto hit = st->route_for(*addr, in_vrf);
            lookups.push_back({{"stage", n},
                               {"vrf", in_vrf.empty() ? std::string(config::kDefaultVrf) : in_vrf},
                               {"address", addr->to_string()},
                               {"route", hit ? route_row(n, *hit) : Json(nullptr)}});
          }
        }
        Json out = {{"stages", std::move(stages)}, {"routes", std::move(routes)}};
        if (addr) out["lookup"] = std::move(lookups);
        return out;
      },
      View{{table("route stages", "/stages",
                  {{"STAGE", "stage"},
                   {"ROUTES", "routes", Unit::Count},
                   {"VRFS", "vrfs", Unit::Count},
                   {"FROM KERNEL", "from_kernel"},
                   {"FORWARDED", "forwarded", Unit::Count},
                   {"TO KERNEL", "to_kernel", Unit::Count},
                   {"NO ROUTE", "no_route", Unit::Count},
                   {"TTL EXPIRED", "ttl_expired", Unit::Count},
                   {"TOO BIG", "packet_too_big", Unit::Count},
                   {"NOT IP", "not_ip", Unit::Count},
                   {"BAD CHECKSUM", "ipv4_bad_checksum", Unit::Count},
                   {"MARTIAN SRC", "martian_source", Unit::Count},
                   {"MARTIAN DST", "martian_destination", Unit::Count},
                   {"ICMP SENT", "icmp_sent", Unit::Count},
                   {"ICMP LIMITED", "icmp_limited", Unit::Count}}),
            table("routes", "/routes",
                  {{"STAGE", "stage"},
                   {"VRF", "vrf"},
                   {"PREFIX", "prefix"},
                   {"ACTION", "action"},
                   {"SOURCE", "source"},
                   {"PROTOCOL", "protocol"},
                   {"NEXT HOPS", "nexthops"}}),
            table("lookup", "/lookup",
                  {{"STAGE", "stage"},
                   {"VRF", "vrf"},
                   {"ADDRESS", "address"},
                   {"PREFIX", "/route/prefix"},
                   {"ACTION", "/route/action"},
                   {"NEXT HOPS", "/route/nexthops"}})}}});
}

}  // namespace vecflow::control
