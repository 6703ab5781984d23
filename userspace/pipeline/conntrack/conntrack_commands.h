// The conntrack stage's part of the control plane: `sessions` (sessions by state, the largest by
// packets or bytes, filtered by address, port or state; with one match, all of that session)
// and the conntrack and NAT series in /metrics.
#pragma once

#include <vector>

#include "api/counter_table.h"
#include "api/registry.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// `sessions`: its name, summary and arguments (conntrack_spec.cc).
extern const CommandSpec kSessionsSpec;

// StageModule::add_commands of the conntrack stage type: nothing when `pipeline` has no
// conntrack stage. The sessions are read on the control thread, each under its sequence count
// (pipeline/conntrack/conntrack_table.h).
void add_conntrack_commands(Registry& registry, Pipeline& pipeline);

// The stage's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> conntrack_counter_tables();

}  // namespace vecflow::control
