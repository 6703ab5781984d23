// Reloading the vrfs section while traffic runs: which VRFs there are and which ports each
// has. Every route stage rebuilds its table with the new VRFs and the next file's routes in
// one swap (RouteStage::replace_vrfs), since a VRF added or removed comes with its routes: a
// packet is routed by the old VRFs and routes or by the new ones, never a mix, and a VRF or a
// port the reload does not touch keeps forwarding.
//
// Threading: control thread (the Reloader's).
#pragma once

#include "config/config.h"
#include "control/reload.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

void register_vrf_reload(Reloader& reloader, Pipeline& pipeline);

}  // namespace vecflow::control
