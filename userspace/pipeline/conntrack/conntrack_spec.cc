// The conntrack stage type's command, as a spec (api/command_spec.h): vecflowctl links this
// file and none of the stage, and builds `vecflowctl sessions` from it.
#include "api/command_spec.h"

namespace vecflow::control {

extern const CommandSpec kSessionsSpec{
    "sessions",
    "Connection-tracking sessions: how many by state, the largest by packets (or bytes, or the "
    "oldest); all of a session when one matches",
    Access::Read,
    {{"stage", ArgType::String, "Only this conntrack stage"},
     {"address", ArgType::String, "Only sessions with this IP address at either end"},
     {"port",
      ArgType::Uint,
      "Only sessions with this TCP/UDP/SCTP port at either end",
      false,
      false,
      {},
      {},
      1,
      65535},
     {"state", ArgType::String,
      "Only sessions in this state (established, syn_sent, udp_assured ...)"},
     {"vrf", ArgType::String, "Only sessions of this VRF ('default': of the ports in none)"},
     {"top",
      ArgType::Uint,
      "Show this many sessions (default 20)",
      false,
      false,
      {},
      {},
      1,
      100000},
     {"sort",
      ArgType::String,
      "Order by packets (default), bytes or age",
      false,
      false,
      {},
      {"packets", "bytes", "age"}}}};

namespace {
const CommandCatalogue::Entry kConntrackEntry{kSessionsSpec};
}

}  // namespace vecflow::control
