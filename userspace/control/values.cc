#include "control/values.h"

#include "runtime/cycles.h"

namespace vecflow::control {

Json tsc_percent(std::optional<double> cycles_per_s) {
  uint64_t hz = tsc_hz();
  if (!cycles_per_s || hz == 0) return nullptr;
  return *cycles_per_s * 100.0 / static_cast<double>(hz);
}

}  // namespace vecflow::control
