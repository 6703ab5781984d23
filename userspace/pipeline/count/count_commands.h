// The count stage's part of the control plane: `flows` (the top flows by packets or bytes of the
// count stages that count by flow, merged over lcores).
#pragma once

#include "api/registry.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// `flows`: its name, summary and arguments (count_spec.cc).
extern const CommandSpec kFlowsSpec;

// StageModule::add_commands of the count stage type. `flows` is there without a count stage by
// flow too: it fails saying how to add one. The lcores' tables are merged on the control thread
// (CountStage::top_flows) while the workers keep counting.
void add_count_commands(Registry& registry, Pipeline& pipeline);

}  // namespace vecflow::control
