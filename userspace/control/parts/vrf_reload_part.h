// Reloading the vrfs section while traffic runs: which VRFs there are and which ports each
// has. Every route stage rebuilds its table with the new VRFs and the next file's routes in
// one swap (RouteStage::replace_vrfs), since a VRF added or removed comes with its routes: a
// packet is routed by the old VRFs and routes or by the new ones, never a mix, and a VRF or a
// port the reload does not touch keeps forwarding.
//
// In /metrics each port's VRF is an info series, vecflow_port_vrf_info{port, vrf} 1, as the
// last applied file has it: a dashboard joins any port's series with it to group by VRF.
//
// Threading: control thread (the Reloader's; collectors run there too).
#pragma once

#include "api/registry.h"
#include "config/config.h"
#include "control/reload.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

void register_vrf_reload(Reloader& reloader, Pipeline& pipeline);

// `running` is the appliance's running configuration; it outlives the registry's use of it.
void register_vrf_metrics(Registry& registry, const config::ApplianceConfig& running);

}  // namespace vecflow::control
