// Fault injection (control.fault_injection): commands that break the data path on purpose, so
// that what an operator sees of a real fault — status, log, metrics, accounting — can be
// tested and drilled. Refused unless the running configuration turns them on.
//
//   fault-stall lcore=N ms=M   lcore N's next round blocks for M ms (a service stuck in a
//                              system call): its services stop, the flows they serve wait
#pragma once

#include "api/registry.h"
#include "config/config.h"
#include "runtime/runtime.h"

namespace vecflow::control {

// `running` is the appliance's running configuration, read at each call (a reload may turn
// fault injection on or off).
void register_faults(Registry& registry, Runtime& runtime, const config::ApplianceConfig& running);

}  // namespace vecflow::control
