#include "pipeline/neighbour/neighbour_commands.h"

#include <string>

#include <fmt/format.h>

#include "api/values.h"
#include "pipeline/neighbour/neighbour_stage.h"
#include "pipeline/neighbour_table.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kNeighbourPackets{
    "vecflow_neighbour_packets_total",
    "What a neighbour stage did with packets: resolved, unresolved, unplaced; of the "
    "unresolved, held (policy hold), and of those held_sent and held_dropped",
    MetricType::Counter,
    {"stage", "outcome"}};

// A port's name, or its index when the pipeline knows no such port.
std::string port_name(const Pipeline& p, PortId id) {
  size_t i = to_index(id);
  return i < p.ports().size() ? p.ports()[i].name : std::to_string(i);
}

}  // namespace

void add_neighbour_commands(Registry& registry, Pipeline& pipeline) {
  registry.add_collector("neighbour", [&pipeline](Snapshot& s) {
    for (NeighbourStage* st : pipeline.all<NeighbourStage>()) {
      NeighbourCounters c = st->counters();
      s.add(kNeighbourPackets, {st->name(), "resolved"}, c.resolved);
      s.add(kNeighbourPackets, {st->name(), "unresolved"}, c.unresolved);
      s.add(kNeighbourPackets, {st->name(), "unplaced"}, c.unplaced);
      s.add(kNeighbourPackets, {st->name(), "held"}, c.held);
      s.add(kNeighbourPackets, {st->name(), "held_sent"}, c.held_sent);
      s.add(kNeighbourPackets, {st->name(), "held_dropped"}, c.held_dropped);
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
        const Snapshot& s = ctx.snapshot;
        Json stages = Json::array();
        for (NeighbourStage* st : pipeline.all<NeighbourStage>()) {
          const std::string& n = st->name();
          stages.push_back(
              {{"stage", n},
               {"unresolved_policy", std::string(unresolved_name(st->unresolved_policy()))},
               {"resolved", s.count(kNeighbourPackets, {n, "resolved"})},
               {"unresolved", s.count(kNeighbourPackets, {n, "unresolved"})},
               {"unplaced", s.count(kNeighbourPackets, {n, "unplaced"})},
               {"held", s.count(kNeighbourPackets, {n, "held"})},
               {"held_sent", s.count(kNeighbourPackets, {n, "held_sent"})},
               {"held_dropped", s.count(kNeighbourPackets, {n, "held_dropped"})},
               {"holding", st->counters().holding()}});
        }
        Json entries = Json::array();
        uint64_t resolved = 0;
        for (const NeighbourInfo& e : pipeline.neighbours().entries()) {
          std::string port = port_name(pipeline, e.port);
          if (only && port != *only) continue;
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
