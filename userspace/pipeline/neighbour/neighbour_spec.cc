// The neighbour stage type's command, as a spec (api/command_spec.h): vecflowctl links this
// file and none of the stage, and builds `vecflowctl neighbours` from it.
#include "api/command_spec.h"

namespace vecflow::control {

extern const CommandSpec kNeighboursSpec{
    "neighbours",
    "Next hops the pipeline resolves (ARP/NDP): static and kernel-learned link addresses",
    Access::Read,
    {{"port", ArgType::String, "Only next hops on this port"},
     {"vrf", ArgType::String, "Only next hops on the ports of this VRF ('default': of none)"}}};

namespace {
const CommandCatalogue::Entry kNeighbourEntry{kNeighboursSpec};
}

}  // namespace vecflow::control
