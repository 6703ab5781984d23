// The forwarding pipeline in the control plane: `pipeline` (per stage: calls, packets, packets
// per call and cycles per packet, as VPP's `show runtime` shows them) and its series in
// /metrics, the shared neighbour table's gauge, the mirror stages' and the kernel sync's
// counters, and each stage type's own commands and series
// (StageModule::add_commands, in the stage type's folder: route's `routes`, acl's `acl`,
// neighbour's `neighbours`, count's `flows`, conntrack's `sessions`).
#pragma once

#include <vector>

#include "api/counter_table.h"
#include "api/registry.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// `pipeline` is owned by the app and outlives the registry's use of it. Handlers read stage
// counters (single-writer, per lcore) and the stages' tables through their control-plane
// accessors, on the control thread.
// `lcore_of_slot[i]` is the lcore id of per-lcore slot i (Runtime::lcores() order); without it
// the slots are shown as lcores 0, 1, ...
void register_pipeline(Registry& registry, Pipeline& pipeline,
                       std::vector<unsigned> lcore_of_slot = {});

// The part's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> pipeline_counter_tables();

}  // namespace vecflow::control
