// The embedded demo appliance file (configs/demo.yaml, compiled in), run when vecflowd is
// started without --config.
#pragma once

namespace vecflow {
extern const char* const kDemoConfig;
}
