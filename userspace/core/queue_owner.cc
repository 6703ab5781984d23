#include "core/queue_owner.h"

namespace vecflow {

std::string_view to_string(QueueOwner o) noexcept {
  return o == QueueOwner::Vecflow ? "vecflow" : "dpdk";
}

}  // namespace vecflow
