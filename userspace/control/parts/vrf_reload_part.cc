#include "control/parts/vrf_reload_part.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipeline/conntrack/conntrack_stage.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/vrf.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kPortVrf{"vecflow_port_vrf_info",
                                   "The VRF a port routes in (value is 1; `default` for the "
                                   "ports no VRF names)",
                                   MetricType::Gauge,
                                   {"port", "vrf"}};

// The routes `next` gives route stage `name`; none when the stage is gone from it (the
// pipeline section then needs a restart, and the stage keeps its routes).
const RouteConfig* next_routes(const config::ApplianceConfig& next, const std::string& name) {
  for (const auto& st : next.pipeline) {
    if (st.name == name) return st.params.get_if<RouteConfig>();
  }
  return nullptr;
}

// One line per VRF added, removed or changed.
std::vector<std::string> vrf_changes(const config::ApplianceConfig& from,
                                     const config::ApplianceConfig& to) {
  std::vector<std::string> out;
  const auto find = [](const config::ApplianceConfig& c, const std::string& name) {
    for (const auto& v : c.vrfs) {
      if (v.name == name) return &v;
    }
    return static_cast<const config::VrfConfig*>(nullptr);
  };
  for (const auto& v : to.vrfs) {
    const config::VrfConfig* was = find(from, v.name);
    if (was == nullptr) {
      out.push_back(fmt::format("vrf {}: added, ports [{}]", v.name, fmt::join(v.ports, ", ")));
    } else if (*was != v) {
      std::vector<std::string> parts;
      if (was->ports != v.ports)
        parts.push_back(fmt::format("ports [{}] -> [{}]", fmt::join(was->ports, ", "),
                                    fmt::join(v.ports, ", ")));
      if (was->table != v.table)
        parts.push_back(fmt::format("table {} -> {}", was->table, v.table));
      const auto zone = [](const config::VrfConfig& c) {
        return c.conntrack_zone.empty() ? c.name : c.conntrack_zone;
      };
      if (zone(*was) != zone(v))
        parts.push_back(fmt::format("conntrack zone {} -> {}", zone(*was), zone(v)));
      if (!parts.empty()) out.push_back(fmt::format("vrf {}: {}", v.name, fmt::join(parts, ", ")));
    }
  }
  for (const auto& v : from.vrfs) {
    if (find(to, v.name) == nullptr) out.push_back(fmt::format("vrf {}: removed", v.name));
  }
  return out;
}

}  // namespace

void register_vrf_reload(Reloader& reloader, Pipeline& pipeline) {
  reloader.add_section(
      "vrfs",
      {nullptr,
       [&pipeline](const config::ApplianceConfig& next) -> Result<void> {
         const auto routes = pipeline.all<RouteStage>();
         const auto trackers = pipeline.all<ConntrackStage>();
         // Every VRF keeps its id: the conntrack sessions of a VRF (their zone) outlive the
         // reload, and the replies they hand the route stages name the VRF by it.
         const std::vector<config::VrfConfig> vrfs =
             keep_vrf_ids(!routes.empty()     ? routes.front()->vrfs()
                          : !trackers.empty() ? trackers.front()->vrfs()
                                              : std::vector<config::VrfConfig>{},
                          next.vrfs);
         // Each route stage in turn; when one fails, those before it get their tables back.
         struct Before {
           RouteStage* stage;
           std::vector<config::VrfConfig> vrfs;
           std::vector<StaticRoute> routes;
         };
         std::vector<Before> done;
         for (RouteStage* st : routes) {
           Before before{st, st->vrfs(), st->config_routes()};
           const RouteConfig* r = next_routes(next, st->name());
           auto applied = st->replace_vrfs(vrfs, r ? r->routes : before.routes);
           if (!applied) {
             for (auto& b : done)
               (void)b.stage->replace_vrfs(std::move(b.vrfs), std::move(b.routes));
             return fail("route stage '{}': {}", st->name(), applied.error().message);
           }
           done.push_back(std::move(before));
         }
         // After the route stages: a session's VRF id reaches a route table that has it. The
         // ports were checked with the route tables, so this does not fail.
         for (ConntrackStage* st : trackers) {
           if (auto r = st->replace_vrfs(vrfs); !r)
             return fail("conntrack stage '{}': {}", st->name(), r.error().message);
         }
         // The kernel tables the VRFs follow may have changed with them.
         for (RouteStage* st : routes) {
           if (auto r = st->refresh_kernel_routes(); !r)
             return fail("route stage '{}': {}", st->name(), r.error().message);
         }
         return {};
       }},
      vrf_changes);
}

void register_vrf_metrics(Registry& registry, const config::ApplianceConfig& running) {
  registry.add_collector("vrfs", [&running](Snapshot& s) {
    for (const auto& port : running.ports) {
      std::string vrf(config::kDefaultVrf);
      for (const auto& v : running.vrfs) {
        if (std::ranges::find(v.ports, port.name) != v.ports.end()) vrf = v.name;
      }
      s.set(kPortVrf, {port.name, vrf}, 1);
    }
  });
}

}  // namespace vecflow::control
