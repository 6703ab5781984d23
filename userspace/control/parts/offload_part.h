// Flow offload in the control plane: `offload` (state, what is offloaded and its hits, the
// flows refused and why), its counters in /metrics, the `offload` section's live reload, and
// the flush that takes every offloaded flow back to user space after any reload.
#pragma once

#include "api/registry.h"
#include "control/reload.h"
#include "steer/flow_offloader.h"

namespace vecflow::control {

void register_offload(Registry& registry, Reloader& reloader, steer::FlowOffloader& offloader);

}  // namespace vecflow::control
