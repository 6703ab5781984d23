// EAL for a test binary: initialised once, --no-huge, a unique file prefix, no telemetry, and
// vecflow's mbuf metadata registered. Call vecflow::test::init_eal() at the start of any test
// that needs DPDK; it skips the test if EAL cannot start.
#pragma once

#include <string>

namespace vecflow::test {

// Returns an empty string when EAL is up, else why it is not.
const std::string& init_eal();

}  // namespace vecflow::test

#define VECFLOW_REQUIRE_EAL()                                         \
  do {                                                                \
    const std::string& why_ = ::vecflow::test::init_eal();            \
    if (!why_.empty()) GTEST_FAIL() << "EAL did not start: " << why_; \
  } while (0)
