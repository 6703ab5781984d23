#include "core/sched_types.h"

namespace vecflow {

std::string_view to_string(SchedType t) noexcept {
  switch (t) {
    case SchedType::Atomic:
      return "atomic";
    case SchedType::Ordered:
      return "ordered";
    case SchedType::Parallel:
      return "parallel";
  }
  return "?";
}

std::string_view to_string(SchedBackend b) noexcept {
  return b == SchedBackend::Builtin ? "builtin" : "eventdev";
}

std::string_view to_string(FlowIdSource f) noexcept {
  switch (f) {
    case FlowIdSource::Auto:
      return "auto";
    case FlowIdSource::Xdp:
      return "xdp";
    case FlowIdSource::Rss:
      return "rss";
    case FlowIdSource::Software:
      return "software";
  }
  return "?";
}

}  // namespace vecflow
