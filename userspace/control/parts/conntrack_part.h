// Connection tracking in the control plane: `sessions` (sessions by state, the largest by
// packets or bytes, filtered by address, port or state; with one match, all of that session)
// and the conntrack stages' series in /metrics.
#pragma once

#include "control/registry.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// `pipeline` is owned by the app and outlives the registry's use of it. The sessions are read
// on the control thread, each under its sequence count (pipeline/conntrack_table.h).
void register_conntrack(Registry& registry, Pipeline& pipeline);

}  // namespace vecflow::control
