// Reloading the pipeline section while traffic runs.
//
// What a running pipeline can change is its tables: the keys each stage type names in its
// StageReload (pipeline/stage_registry.h), e.g. a route stage's routes, an acl stage's rules
// and default action, a neighbour stage's static entries. Each is swapped in through the
// type's own apply (RouteStage::replace_routes and AclStage::replace_rules compile a new
// table and publish it under RCU, so a packet is decided by the old or the new table, never a
// mix; a static neighbour is one atomic word). Everything else is structure, fixed when the
// data path is built: the list of stages, their types, names and order, sched and fuse (the
// scheduler's queues), and the other stage parameters (from_kernel, icmp_time_exceeded,
// unresolved, l2, mirror, count). A reload that changes any of it is refused for the whole
// section with the reasons, and the pipeline keeps running as it was.
//
// Threading: control thread (the Reloader's).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "control/reload.h"
#include "core/error.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// Why `next` cannot be applied to a pipeline built from `running`, one line each naming what
// needs a restart; empty when only tables differ. `ports`: the port names the running pipeline
// resolves, so a table naming any other port is refused too.
std::vector<std::string> pipeline_restart_reasons(
    const std::vector<config::StageConfig>& running, const std::vector<config::StageConfig>& next,
    const std::vector<std::string>& ports,
    const StageRegistry& registry = StageRegistry::builtin());

// What applying `next`'s tables over `running`'s changes, one line per changed stage, e.g.
// "route: 2 routes → 3 (added 203.0.113.0/24)". Assumes no restart reason.
std::vector<std::string> pipeline_table_changes(
    const std::vector<config::StageConfig>& running, const std::vector<config::StageConfig>& next,
    const StageRegistry& registry = StageRegistry::builtin());

// Applies table changes to a running pipeline; remembers what it applied last.
class PipelineTables {
 public:
  // `pipeline` was built from `applied` and outlives this object.
  PipelineTables(Pipeline& pipeline, std::vector<config::StageConfig> applied);

  // Swaps in every table of `next` that differs from what was applied last, stage by stage in
  // pipeline order. Refused (nothing changed) when the structure differs. When a replacement
  // fails, the stages already changed get their previous tables back before the error is
  // returned.
  Result<void> apply(const std::vector<config::StageConfig>& next);

  std::vector<std::string> port_names() const;
  const StageRegistry& registry() const { return pipeline_.registry(); }

 private:
  // Swaps the tables of `to` into the stage built from (or last given) `from`.
  Result<void> apply_stage(const config::StageConfig& from, const config::StageConfig& to);

  Pipeline& pipeline_;
  std::vector<config::StageConfig> applied_;
};

// Registers the "pipeline" section with the reloader. `running` is the appliance's running
// configuration (the pipeline was built from its pipeline section).
void register_pipeline_reload(Reloader& reloader, Pipeline& pipeline,
                              const config::ApplianceConfig& running);

}  // namespace vecflow::control
