// The acl stage's part of the control plane: `acl` (the rules in force per acl stage, in order,
// with the packets and bytes each decided) and the per-rule series in /metrics.
#pragma once

#include "api/registry.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// `acl`: its name, summary and arguments (acl_spec.cc).
extern const CommandSpec kAclSpec;

// StageModule::add_commands of the acl stage type. `acl` is there with no acl stage too (it
// lists no rule, and stage=NAME answers that there are none). The rules and their counters are
// read on the control thread through AclStage::rules().
void add_acl_commands(Registry& registry, Pipeline& pipeline);

}  // namespace vecflow::control
