// The route stage's part of the control plane: `routes` (the routes in force per route stage,
// from the file and the kernel, what each stage did with packets, and with lookup=ADDRESS the
// route each stage picks for it) and the route series in /metrics.
#pragma once

#include <vector>

#include "api/counter_table.h"
#include "api/registry.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// `routes`: its name, summary and arguments (route_spec.cc).
extern const CommandSpec kRoutesSpec;

// StageModule::add_commands of the route stage type. `routes` is there with no route stage too
// (it lists none, and stage=NAME answers that there are none). The tables are read on the control
// thread through RouteStage's control-plane accessors, under the stage's lock.
void add_route_commands(Registry& registry, Pipeline& pipeline);

// The stage's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> route_counter_tables();

}  // namespace vecflow::control
