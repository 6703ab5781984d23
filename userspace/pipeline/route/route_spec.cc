// The route stage type's command, as a spec (api/command_spec.h): vecflowctl links this file
// and none of the stage, and builds `vecflowctl routes` from it.
#include "api/command_spec.h"

namespace vecflow::control {

extern const CommandSpec kRoutesSpec{
    "routes",
    "Routes in force per route stage (file and kernel), and what each stage did",
    Access::Read,
    {{"stage", ArgType::String, "Only this route stage"},
     {"lookup", ArgType::String, "Also show the route that decides this IP address"},
     {"vrf", ArgType::String,
      "Only this VRF's routes, and --lookup in it (default: all routes, lookup in 'default')"}}};

namespace {
const CommandCatalogue::Entry kRouteEntry{kRoutesSpec};
}

}  // namespace vecflow::control
