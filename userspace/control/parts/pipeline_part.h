// The forwarding pipeline in the control plane: `pipeline` (per stage: calls, packets, packets
// per call and cycles per packet, as VPP's `show runtime` shows them), the tables in use
// (`routes`, `acl`, `neighbours`) with their counters, the top flows of count stages
// (`flows`), each stage type's own commands (StageModule::add_commands: conntrack's `sessions`),
// and all of it in /metrics.
#pragma once

#include <vector>

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

}  // namespace vecflow::control
