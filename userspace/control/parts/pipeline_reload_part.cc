#include "control/parts/pipeline_reload_part.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "control/config_json.h"
#include "core/log.h"
#include "pipeline/acl_stage.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/route_stage.h"

namespace vecflow::control {
namespace {

// Items named in one summary line before the rest is only counted: a reload that replaces a
// thousand routes says so in one line, not a thousand.
constexpr size_t kNamedItems = 5;

constexpr std::string_view kRestart = "restart vecflowd to apply it";

// The stages as `vecflowctl config` shows them: every default filled in, comparable as JSON.
Json stages_json(const std::vector<config::StageConfig>& stages) {
  config::ApplianceConfig c;
  c.pipeline = stages;
  return config_to_json(c)["pipeline"];
}

// The keys of a stage's JSON that are tables, replaced while running.
std::vector<std::string_view> live_keys(std::string_view type) {
  if (type == "route") return {"routes"};
  if (type == "acl") return {"default", "rules"};
  if (type == "neighbour") return {"static"};
  return {};
}

bool is_live(std::string_view type, std::string_view key) {
  auto keys = live_keys(type);
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

bool tables_differ(const Json& a, const Json& b) {
  for (auto key : live_keys(a["stage"].get<std::string>())) {
    if (a.value(key, Json()) != b.value(key, Json())) return true;
  }
  return false;
}

std::string value_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "unset";
  return v.dump();
}

std::string names_text(const std::vector<std::string>& names) {
  if (names.size() <= kNamedItems) return fmt::format("{}", fmt::join(names, ", "));
  return fmt::format("{} and {} more", fmt::join(names.begin(), names.begin() + kNamedItems, ", "),
                     names.size() - kNamedItems);
}

std::string plural(size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string route_key(const Json& r) {
  return r["prefix"].get<std::string>();
}
std::string rule_key(const Json& r) {
  return r["name"].get<std::string>();
}
std::string neighbour_key(const Json& n) {
  return fmt::format("{} on {}", n["ip"].get<std::string>(), n["port"].get<std::string>());
}

// "2 routes → 3 (added 203.0.113.0/24)", or nothing when the lists are equal.
std::optional<std::string> list_change(const Json& a, const Json& b, std::string_view one,
                                       std::string_view many, std::string (*key)(const Json&)) {
  if (a == b) return std::nullopt;
  std::map<std::string, const Json*> before, after;
  std::vector<std::string> order_a, order_b;
  for (const auto& item : a) {
    before[key(item)] = &item;
    order_a.push_back(key(item));
  }
  for (const auto& item : b) {
    after[key(item)] = &item;
    order_b.push_back(key(item));
  }
  std::vector<std::string> added, removed, changed, common_a, common_b;
  for (const auto& k : order_b) {
    auto it = before.find(k);
    if (it == before.end()) {
      added.push_back(k);
    } else {
      common_b.push_back(k);
      if (*it->second != *after[k]) changed.push_back(k);
    }
  }
  for (const auto& k : order_a) {
    if (!after.contains(k)) {
      removed.push_back(k);
    } else {
      common_a.push_back(k);
    }
  }
  std::vector<std::string> parts;
  if (!added.empty()) parts.push_back("added " + names_text(added));
  if (!removed.empty()) parts.push_back("removed " + names_text(removed));
  if (!changed.empty()) parts.push_back("changed " + names_text(changed));
  if (common_a != common_b) parts.push_back("reordered");
  return fmt::format("{} → {} ({})", plural(a.size(), one, many), b.size(), fmt::join(parts, "; "));
}

std::vector<std::string> names_of(const Json& stages) {
  std::vector<std::string> out;
  for (const auto& s : stages)
    out.push_back(s["name"].get<std::string>());
  return out;
}

std::vector<std::string> missing_from(const std::vector<std::string>& a,
                                      const std::vector<std::string>& b) {
  std::vector<std::string> out;
  for (const auto& n : a) {
    if (std::find(b.begin(), b.end(), n) == b.end()) out.push_back(n);
  }
  return out;
}

}  // namespace

std::vector<std::string> pipeline_restart_reasons(const std::vector<config::StageConfig>& running,
                                                  const std::vector<config::StageConfig>& next,
                                                  const std::vector<std::string>& ports) {
  std::vector<std::string> why;
  const Json a = stages_json(running);
  const Json b = stages_json(next);
  const auto names_a = names_of(a);
  const auto names_b = names_of(b);
  if (names_a != names_b) {
    auto added = missing_from(names_b, names_a);
    auto removed = missing_from(names_a, names_b);
    if (!added.empty()) {
      why.push_back(fmt::format(
          "stage{} added ({}): stages and their scheduler queues are built at start; {}",
          added.size() == 1 ? "" : "s", fmt::join(added, ", "), kRestart));
    }
    if (!removed.empty()) {
      why.push_back(fmt::format(
          "stage{} removed ({}): stages and their scheduler queues are built at start; {}",
          removed.size() == 1 ? "" : "s", fmt::join(removed, ", "), kRestart));
    }
    if (added.empty() && removed.empty()) {
      why.push_back(fmt::format(
          "stages reordered ({} → {}): the order is fixed when the pipeline is built; {}",
          fmt::join(names_a, ", "), fmt::join(names_b, ", "), kRestart));
    }
    return why;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const Json& x = a[i];
    const Json& y = b[i];
    const std::string name = x["name"];
    const std::string type = x["stage"];
    if (y["stage"] != type) {
      why.push_back(fmt::format("stage '{}': type {} → {}: a stage is built for its type; {}", name,
                                type, value_text(y["stage"]), kRestart));
      continue;
    }
    Json keys = x;
    keys.update(y);
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      const std::string& key = it.key();
      if (key == "name" || key == "stage" || is_live(type, key)) continue;
      const Json from = x.value(key, Json());
      const Json to = y.value(key, Json());
      if (from == to) continue;
      const bool scalar = from.is_primitive() && to.is_primitive();
      why.push_back(
          fmt::format("stage '{}': {} {}: {}; {}", name, key,
                      scalar ? fmt::format("{} → {}", value_text(from), value_text(to)) : "changed",
                      key == "sched" || key == "fuse" ? "the scheduler's queues are made at start"
                                                      : "the stage reads it when it is built",
                      kRestart));
    }
  }
  auto known = [&ports](const std::string& p) {
    return std::find(ports.begin(), ports.end(), p) != ports.end();
  };
  for (const auto& st : next) {
    if (const auto* r = std::get_if<config::RouteStage>(&st.params)) {
      for (const auto& route : r->routes) {
        for (const auto& hop : route.nexthops) {
          if (!known(hop.port)) {
            why.push_back(
                fmt::format("stage '{}': route {} uses port '{}', which this vecflowd does not run "
                            "(ports are opened at start); {}",
                            st.name, route.prefix.to_string(), hop.port, kRestart));
          }
        }
      }
    } else if (const auto* n = std::get_if<config::NeighbourStage>(&st.params)) {
      for (const auto& e : n->entries) {
        if (!known(e.port)) {
          why.push_back(fmt::format(
              "stage '{}': static neighbour {} uses port '{}', which this vecflowd does not run "
              "(ports are opened at start); {}",
              st.name, e.ip.to_string(), e.port, kRestart));
        }
      }
    }
  }
  return why;
}

std::vector<std::string> pipeline_table_changes(const std::vector<config::StageConfig>& running,
                                                const std::vector<config::StageConfig>& next) {
  std::vector<std::string> out;
  const Json a = stages_json(running);
  const Json b = stages_json(next);
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const Json& x = a[i];
    const Json& y = b[i];
    const std::string type = x["stage"];
    std::vector<std::string> parts;
    if (type == "route") {
      if (auto c = list_change(x["routes"], y["routes"], "route", "routes", route_key))
        parts.push_back(*c);
    } else if (type == "acl") {
      if (auto c = list_change(x["rules"], y["rules"], "rule", "rules", rule_key))
        parts.push_back(*c);
      if (x["default"] != y["default"]) {
        parts.push_back(
            fmt::format("default {} → {}", value_text(x["default"]), value_text(y["default"])));
      }
    } else if (type == "neighbour") {
      if (auto c = list_change(x["static"], y["static"], "static entry", "static entries",
                               neighbour_key))
        parts.push_back(*c);
    }
    if (!parts.empty())
      out.push_back(fmt::format("{}: {}", x["name"].get<std::string>(), fmt::join(parts, "; ")));
  }
  return out;
}

PipelineTables::PipelineTables(Pipeline& pipeline, std::vector<config::StageConfig> applied)
    : pipeline_(pipeline), applied_(std::move(applied)) {}

std::vector<std::string> PipelineTables::port_names() const {
  std::vector<std::string> out;
  for (const auto& p : pipeline_.ports())
    out.push_back(p.name);
  return out;
}

Result<void> PipelineTables::apply_stage(const config::StageConfig& to) {
  if (auto* route = pipeline_.find<RouteStage>(to.name))
    return route->replace_routes(std::get<config::RouteStage>(to.params).routes);
  if (auto* acl = pipeline_.find<AclStage>(to.name))
    return acl->replace_rules(std::get<config::AclStage>(to.params));
  return fail("the running pipeline has no table stage '{}'", to.name);
}

Result<void> PipelineTables::apply_neighbours(const std::vector<config::StageConfig>& from,
                                              const std::vector<config::StageConfig>& to) {
  // Static entries of every neighbour stage live in the pipeline's one table.
  using Statics = std::map<std::string, const config::StaticNeighbour*>;
  auto collect = [](const std::vector<config::StageConfig>& stages) {
    Statics m;
    for (const auto& s : stages) {
      if (const auto* n = std::get_if<config::NeighbourStage>(&s.params)) {
        for (const auto& e : n->entries)
          m[e.port + " " + e.ip.to_string()] = &e;
      }
    }
    return m;
  };
  const Statics before = collect(from);
  const Statics after = collect(to);
  const auto ports = port_names();
  auto port_id = [&ports](const std::string& name) {
    return PortId{
        static_cast<uint16_t>(std::find(ports.begin(), ports.end(), name) - ports.begin())};
  };
  NeighbourTable& table = pipeline_.neighbours();
  std::vector<const config::StaticNeighbour*> set;
  for (const auto& [key, e] : after) {
    auto old = before.find(key);
    if (old != before.end() && old->second->mac == e->mac) continue;
    if (auto r = table.set_static(port_id(e->port), e->ip, e->mac); !r) {
      // Put back the entries this call already changed.
      for (const auto* done : set) {
        auto prev = before.find(done->port + " " + done->ip.to_string());
        if (prev != before.end()) {
          (void)table.set_static(port_id(done->port), done->ip, prev->second->mac);
        } else {
          table.clear_static(port_id(done->port), done->ip);
        }
      }
      return fail("static neighbour {} on {}: {}", e->ip.to_string(), e->port, r.error().message);
    }
    set.push_back(e);
  }
  for (const auto& [key, e] : before) {
    if (!after.contains(key)) table.clear_static(port_id(e->port), e->ip);
  }
  return {};
}

Result<void> PipelineTables::apply(const std::vector<config::StageConfig>& next) {
  if (auto why = pipeline_restart_reasons(applied_, next, port_names()); !why.empty())
    return fail("{}", fmt::join(why, "; "));
  const Json a = stages_json(applied_);
  const Json b = stages_json(next);
  std::vector<size_t> done;
  auto undo = [&]() {
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      if (auto r = apply_stage(applied_[*it]); !r) {
        log::get("pipeline")
            ->error("reload: could not restore stage '{}': {}", applied_[*it].name,
                    r.error().message);
      }
    }
  };
  for (size_t i = 0; i < next.size(); ++i) {
    if (next[i].type == "neighbour" || !tables_differ(a[i], b[i])) continue;
    if (auto r = apply_stage(next[i]); !r) {
      undo();
      return fail("stage '{}': {}", next[i].name, r.error().message);
    }
    done.push_back(i);
  }
  if (auto r = apply_neighbours(applied_, next); !r) {
    undo();
    return r;
  }
  applied_ = next;
  return {};
}

void register_pipeline_reload(Reloader& reloader, Pipeline& pipeline,
                              const config::ApplianceConfig& running) {
  auto tables = std::make_shared<PipelineTables>(pipeline, running.pipeline);
  reloader.add_section(
      "pipeline",
      {[tables](const config::ApplianceConfig& from, const config::ApplianceConfig& to) {
         return pipeline_restart_reasons(from.pipeline, to.pipeline, tables->port_names());
       },
       [tables](const config::ApplianceConfig& to) { return tables->apply(to.pipeline); }},
      [](const config::ApplianceConfig& from, const config::ApplianceConfig& to) {
        return pipeline_table_changes(from.pipeline, to.pipeline);
      });
}

}  // namespace vecflow::control
