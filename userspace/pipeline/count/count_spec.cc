// The count stage type's command, as a spec (api/command_spec.h): vecflowctl links this file
// and none of the stage, and builds `vecflowctl flows` from it.
#include "api/command_spec.h"

namespace vecflow::control {

// At most 100 000 flows a stage: merging the lcores' tables already costs a pass over every
// tracked flow; a list longer than that is a job for a capture, not a terminal.
extern const CommandSpec kFlowsSpec{
    "flows",
    "Top flows by packets or bytes, from the pipeline's count stages (by: flow)",
    Access::Read,
    {{"top", ArgType::Uint, "How many flows (default 20)", false, false, "-n,--top", {}, 1, 100000},
     {"by",
      ArgType::String,
      "Order by packets (default) or bytes",
      false,
      false,
      {},
      {"packets", "bytes"}},
     {"stage", ArgType::String, "Only this count stage"}}};

namespace {
const CommandCatalogue::Entry kCountEntry{kFlowsSpec};
}

}  // namespace vecflow::control
