// The commands control/ answers, as specs (api/command_spec.h): what each is called, says and
// takes. The handlers are in the files named beside each; vecflowctl builds its CLI from these.
#pragma once

#include "api/command_spec.h"

namespace vecflow::control {

// builtin_commands.cc
extern const CommandSpec kCommandsSpec;
extern const CommandSpec kMetricsSpec;
extern const CommandSpec kClearSpec;
extern const CommandSpec kStatusSpec;
extern const CommandSpec kLcoresSpec;
extern const CommandSpec kAccountingSpec;
extern const CommandSpec kErrorsSpec;
extern const CommandSpec kLogSpec;
extern const CommandSpec kLogLevelSpec;
// reload.cc
extern const CommandSpec kReloadSpec;
extern const CommandSpec kConfirmSpec;
extern const CommandSpec kRollbackSpec;
extern const CommandSpec kConfigSpec;
// resources.cc
extern const CommandSpec kBuffersSpec;
// capture.cc
extern const CommandSpec kCaptureStartSpec;
extern const CommandSpec kCaptureStopSpec;
extern const CommandSpec kCapturesSpec;
// trace.cc
extern const CommandSpec kTraceAddSpec;
extern const CommandSpec kTraceClearSpec;
extern const CommandSpec kTraceSpec;
// fault.cc
extern const CommandSpec kFaultStallSpec;
// parts/
extern const CommandSpec kPipelineSpec;
extern const CommandSpec kSchedSpec;
extern const CommandSpec kPortsSpec;
extern const CommandSpec kHardwareSpec;
extern const CommandSpec kSteeringSpec;
// parts/offload_part.cc
extern const CommandSpec kOffloadSpec;

}  // namespace vecflow::control
