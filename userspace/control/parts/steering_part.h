// The XDP steering part in the control plane: `steering` (per interface, per rule and per
// action counts, parse errors), its counters in /metrics, its XDP drops in `errors`, its
// interfaces in `status`, and live reload of the steering section.
#pragma once

#include <vector>

#include "api/counter_table.h"
#include "api/registry.h"
#include "config/config.h"
#include "control/reload.h"
#include "steer/steering.h"

namespace vecflow::control {

// `running` is the appliance's running configuration (rule names, by rule id).
void register_steering(Registry& registry, Reloader& reloader, steer::XdpSteering& steering,
                       const config::ApplianceConfig& running);

// The part's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> steering_counter_tables();

}  // namespace vecflow::control
