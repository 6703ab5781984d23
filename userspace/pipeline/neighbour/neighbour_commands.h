// The neighbour stage's part of the control plane: `neighbours` (what each neighbour stage did
// with packets, and the next hops of the pipeline's neighbour table with their link addresses)
// and the neighbour stages' series in /metrics. The table's own gauge (vecflow_neighbour_entries)
// is the pipeline's: the table is shared (Pipeline owns it, KernelSync fills it, route stages
// name its next hops), so it has one with or without a neighbour stage.
#pragma once

#include <vector>

#include "api/counter_table.h"
#include "api/registry.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// `neighbours`: its name, summary and arguments (neighbour_spec.cc).
extern const CommandSpec kNeighboursSpec;

// StageModule::add_commands of the neighbour stage type. `neighbours` is there with no neighbour
// stage too (the table is there). Entries and counters are read on the control thread while the
// kernel synchroniser and the workers change them.
void add_neighbour_commands(Registry& registry, Pipeline& pipeline);

// The stage's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> neighbour_counter_tables();

}  // namespace vecflow::control
