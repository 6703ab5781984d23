// The acl stage type's command, as a spec (api/command_spec.h): vecflowctl links this file and
// none of the stage, and builds `vecflowctl acl` from it.
#include "api/command_spec.h"

namespace vecflow::control {

extern const CommandSpec kAclSpec{
    "acl",
    "ACL rules in force per acl stage, in order, with the packets each decided",
    Access::Read,
    {{"stage", ArgType::String, "Only this acl stage"}}};

namespace {
const CommandCatalogue::Entry kAclEntry{kAclSpec};
}

}  // namespace vecflow::control
