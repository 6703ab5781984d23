#include "control/parts/pipeline_reload_part.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "control/config_json.h"
#include "control/parts/ports_reload_part.h"
#include "core/log.h"
#include "pipeline/stage_registry.h"

namespace vecflow::control {
namespace {

// Items named in one summary line before the rest is only counted: a reload that replaces a
// thousand routes says so in one line, not a thousand.
constexpr size_t kNamedItems = 5;

// The stages as `vecflowctl config` shows them: every default filled in, comparable as JSON.
Json stages_json(const std::vector<config::StageConfig>& stages) {
  config::ApplianceConfig c;
  c.pipeline = stages;
  return config_to_json(c)["pipeline"];
}

// The keys of a stage's JSON that its type swaps in while running (StageReload::tables).
const std::vector<LiveTable>& live_tables(const StageRegistry& registry, std::string_view type) {
  static const std::vector<LiveTable> kNone;
  const StageModule* m = registry.find(type);
  return m ? m->reload.tables : kNone;
}

bool is_live(const StageRegistry& registry, std::string_view type, std::string_view key) {
  for (const auto& t : live_tables(registry, type)) {
    if (t.key == key) return true;
  }
  return false;
}

bool tables_differ(const StageRegistry& registry, const Json& a, const Json& b) {
  for (const auto& t : live_tables(registry, a["stage"].get<std::string>())) {
    if (a.value(t.key, Json()) != b.value(t.key, Json())) return true;
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
                                                  const std::vector<std::string>& ports,
                                                  const StageRegistry& registry) {
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
          added.size() == 1 ? "" : "s", fmt::join(added, ", "), kRestartToApply));
    }
    if (!removed.empty()) {
      why.push_back(fmt::format(
          "stage{} removed ({}): stages and their scheduler queues are built at start; {}",
          removed.size() == 1 ? "" : "s", fmt::join(removed, ", "), kRestartToApply));
    }
    if (added.empty() && removed.empty()) {
      why.push_back(fmt::format(
          "stages reordered ({} → {}): the order is fixed when the pipeline is built; {}",
          fmt::join(names_a, ", "), fmt::join(names_b, ", "), kRestartToApply));
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
                                type, value_text(y["stage"]), kRestartToApply));
      continue;
    }
    Json keys = x;
    keys.update(y);
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      const std::string& key = it.key();
      if (key == "name" || key == "stage" || is_live(registry, type, key)) continue;
      const Json from = x.value(key, Json());
      const Json to = y.value(key, Json());
      if (from == to) continue;
      const bool scalar = from.is_primitive() && to.is_primitive();
      why.push_back(
          fmt::format("stage '{}': {} {}: {}; {}", name, key,
                      scalar ? fmt::format("{} → {}", value_text(from), value_text(to)) : "changed",
                      key == "sched" || key == "fuse" ? "the scheduler's queues are made at start"
                                                      : "the stage reads it when it is built",
                      kRestartToApply));
    }
  }
  auto known = [&ports](const std::string& p) {
    return std::find(ports.begin(), ports.end(), p) != ports.end();
  };
  for (const auto& st : next) {
    const StageModule* m = registry.find(st.type);
    if (!m || !m->reload.ports) continue;
    for (const auto& [item, port] : m->reload.ports(st.params)) {
      if (!known(port)) {
        why.push_back(fmt::format(
            "stage '{}': {} uses port '{}', which this vecflowd does not run (ports are opened "
            "at start); {}",
            st.name, item, port, kRestartToApply));
      }
    }
  }
  return why;
}

std::vector<std::string> pipeline_table_changes(const std::vector<config::StageConfig>& running,
                                                const std::vector<config::StageConfig>& next,
                                                const StageRegistry& registry) {
  std::vector<std::string> out;
  const Json a = stages_json(running);
  const Json b = stages_json(next);
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const Json& x = a[i];
    const Json& y = b[i];
    std::vector<std::string> parts;
    for (const auto& t : live_tables(registry, x["stage"].get<std::string>())) {
      const Json from = x.value(t.key, Json());
      const Json to = y.value(t.key, Json());
      if (!t.item) {
        if (from != to)
          parts.push_back(fmt::format("{} {} → {}", t.key, value_text(from), value_text(to)));
      } else if (auto c = list_change(from, to, t.one, t.many, t.item)) {
        parts.push_back(*c);
      }
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

Result<void> PipelineTables::apply_stage(const config::StageConfig& from,
                                         const config::StageConfig& to) {
  const StageModule* m = pipeline_.registry().find(to.type);
  Stage* stage = pipeline_.find<Stage>(to.name);
  if (!m || !m->reload.apply || !stage)
    return fail("the running pipeline has no stage '{}' with tables", to.name);
  return m->reload.apply(*stage, pipeline_.context(), from.params, to.params);
}

Result<void> PipelineTables::apply(const std::vector<config::StageConfig>& next) {
  const StageRegistry& registry = pipeline_.registry();
  if (auto why = pipeline_restart_reasons(applied_, next, port_names(), registry); !why.empty())
    return fail("{}", fmt::join(why, "; "));
  const Json a = stages_json(applied_);
  const Json b = stages_json(next);
  std::vector<size_t> done;
  for (size_t i = 0; i < next.size(); ++i) {
    if (!tables_differ(registry, a[i], b[i])) continue;
    if (auto r = apply_stage(applied_[i], next[i]); !r) {
      // Give the stages already changed their previous tables back.
      for (auto it = done.rbegin(); it != done.rend(); ++it) {
        if (auto u = apply_stage(next[*it], applied_[*it]); !u) {
          log::get("pipeline")
              ->error("reload: could not restore stage '{}': {}", applied_[*it].name,
                      u.error().message);
        }
      }
      return fail("stage '{}': {}", next[i].name, r.error().message);
    }
    done.push_back(i);
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
         // The ports the same reload adds (the ports section applies first) are known too.
         auto ports = tables->port_names();
         std::ranges::copy(ports_after_reload(from, to), std::back_inserter(ports));
         return pipeline_restart_reasons(from.pipeline, to.pipeline, ports, tables->registry());
       },
       [tables](const config::ApplianceConfig& to) { return tables->apply(to.pipeline); }},
      [tables](const config::ApplianceConfig& from, const config::ApplianceConfig& to) {
        return pipeline_table_changes(from.pipeline, to.pipeline, tables->registry());
      });
}

}  // namespace vecflow::control
