#include "pipeline/neighbour/neighbour_commands.h"

#include <algorithm>
#include <expected>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "api/counter_table.h"
#include "api/values.h"
#include "pipeline/neighbour/neighbour_stage.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/route/route_stage.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kNeighbourPackets{
    "vecflow_neighbour_packets_total",
    "What a neighbour stage did with packets: resolved, unresolved, unplaced; of the "
    "unresolved, held (policy hold), and of those held_sent and held_dropped",
    MetricType::Counter,
    {"stage", "outcome"}};
// A neighbour stage's counters under {stage}, the key its outcome label.
constexpr auto kNeighbourCounters = std::to_array<CounterField<NeighbourCounters, uint64_t>>({
    {"resolved", &kNeighbourPackets, &NeighbourCounters::resolved, "resolved"},
    {"unresolved", &kNeighbourPackets, &NeighbourCounters::unresolved, "unresolved"},
    {"unplaced", &kNeighbourPackets, &NeighbourCounters::unplaced, "unplaced"},
    {"held", &kNeighbourPackets, &NeighbourCounters::held, "held"},
    {"held_sent", &kNeighbourPackets, &NeighbourCounters::held_sent, "held_sent"},
    {"held_dropped", &kNeighbourPackets, &NeighbourCounters::held_dropped, "held_dropped"},
});
static_assert(covers_struct(kNeighbourCounters));

// The ports of VRF `vrf` ("default": those no VRF names), or an error naming the VRFs. The VRFs
// are the route stages' (every route stage is given the file's); without one there is only
// the default VRF.
std::expected<std::set<std::string>, std::string> ports_of_vrf(Pipeline& pipeline,
                                                               const std::string& vrf) {
  const auto stages = pipeline.all<RouteStage>();
  const std::vector<config::VrfConfig> vrfs =
      stages.empty() ? std::vector<config::VrfConfig>{} : stages.front()->vrfs();
  std::set<std::string> out;
  if (vrf == config::kDefaultVrf) {
    for (const auto& p : pipeline.ports())
      out.insert(p.name);
    for (const auto& v : vrfs)
      for (const auto& p : v.ports)
        out.erase(p);
    return out;
  }
  std::string names(config::kDefaultVrf);
  for (const auto& v : vrfs) {
    if (v.name.empty()) continue;  // a retired place (pipeline/vrf.h)
    if (v.name == vrf) return std::set<std::string>(v.ports.begin(), v.ports.end());
    names += ", " + v.name;
  }
  return std::unexpected(fmt::format("no VRF '{}'; VRFs: {}", vrf, names));
}

// A port's name, or its index when the pipeline knows no such port.
std::string port_name(const Pipeline& p, PortId id) {
  size_t i = to_index(id);
  return i < p.ports().size() ? p.ports()[i].name : std::to_string(i);
}

}  // namespace

std::vector<CounterTableInfo> neighbour_counter_tables() {
  return {describe("NeighbourCounters", kNeighbourCounters)};
}

void add_neighbour_commands(Registry& registry, Pipeline& pipeline) {
  registry.add_collector("neighbour", [&pipeline](Snapshot& s) {
    for (NeighbourStage* st : pipeline.all<NeighbourStage>()) {
      add_counters(s, kNeighbourCounters, st->counters(), {st->name()});
    }
  });
  (void)registry.add_command(Command{
      &kNeighboursSpec,
      [&pipeline](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        auto only = a.string("port");
        if (only) {
          bool known = false;
          std::string names;
          for (const auto& p : pipeline.ports()) {
            known |= p.name == *only;
            names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
          }
          if (!known) {
            return command_error(ErrorCode::BadArguments, "no port '{}'; ports: {}", *only, names);
          }
        }
        std::optional<std::set<std::string>> in_vrf;
        if (auto vrf = a.string("vrf")) {
          auto ports = ports_of_vrf(pipeline, *vrf);
          if (!ports) return command_error(ErrorCode::BadArguments, "{}", ports.error());
          in_vrf = std::move(*ports);
        }
        const Snapshot& s = ctx.snapshot;
        Json stages = Json::array();
        for (NeighbourStage* st : pipeline.all<NeighbourStage>()) {
          const std::string& n = st->name();
          Json row{{"stage", n},
                   {"unresolved_policy", std::string(unresolved_name(st->unresolved_policy()))}};
          add_counters_json(row, s, kNeighbourCounters, {n});
          row["holding"] = st->counters().holding();
          stages.push_back(std::move(row));
        }
        Json entries = Json::array();
        uint64_t resolved = 0;
        for (const NeighbourInfo& e : pipeline.neighbours().entries()) {
          std::string port = port_name(pipeline, e.port);
          if ((only && port != *only) || (in_vrf && !in_vrf->contains(port))) continue;
          resolved += e.mac.has_value();
          entries.push_back({{"id", e.id},
                             {"port", port},
                             {"ip", e.ip.to_string()},
                             {"mac", e.mac ? Json(e.mac->to_string()) : Json(nullptr)},
                             {"state", e.mac        ? "resolved"
                                       : e.is_local ? "local"
                                                    : "unresolved"},
                             {"source", e.is_static ? "static" : "kernel"}});
        }
        uint64_t total = entries.size();
        return Json{{"entries_total", total},
                    {"resolved", resolved},
                    {"unresolved", total - resolved},
                    {"stages", std::move(stages)},
                    {"entries", std::move(entries)}};
      },
      View{{fields("", "",
                   {{"entries", "/entries_total", Unit::Count},
                    {"resolved", "/resolved", Unit::Count},
                    {"unresolved", "/unresolved", Unit::Count}}),
            table("neighbour stages", "/stages",
                  {{"STAGE", "stage"},
                   {"UNRESOLVED POLICY", "unresolved_policy"},
                   {"RESOLVED", "resolved", Unit::Count},
                   {"UNRESOLVED", "unresolved", Unit::Count},
                   {"UNPLACED", "unplaced", Unit::Count},
                   {"HELD", "held", Unit::Count},
                   {"HELD SENT", "held_sent", Unit::Count},
                   {"HELD DROPPED", "held_dropped", Unit::Count},
                   {"HOLDING", "holding", Unit::Count}}),
            table("neighbours", "/entries",
                  {{"PORT", "port"},
                   {"IP", "ip"},
                   {"MAC", "mac"},
                   {"STATE", "state"},
                   {"SOURCE", "source"}})}}});
}

}  // namespace vecflow::control
