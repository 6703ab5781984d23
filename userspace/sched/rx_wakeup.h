// Sleeping on rx queues, for the services that poll them (the rx adapter, the direct path):
// every queue's wakeup descriptor armed, or none, since a queue left unarmed would let a
// packet wait out the whole sleep.
#pragma once

#include <cstddef>
#include <span>

#include "io/port.h"
#include "runtime/service.h"

namespace vecflow::sched {

// Disarms what arm_rx_wakeups armed.
template <class RxQueue>
void disarm_rx_wakeups(std::span<const RxQueue> queues) noexcept {
  for (const RxQueue& q : queues)
    q.port->disarm_wakeup(q.queue);
}

// Arms each queue's wakeup (Port::arm_wakeup) into `fds`, in order. Returns how many are armed:
// all of them, or 0 when one could not be (its port has no descriptor, or the set is full),
// the ones before it disarmed again. RxQueue: {Port* port; uint16_t queue; ...}.
template <class RxQueue>
size_t arm_rx_wakeups(std::span<const RxQueue> queues, WakeFds& fds) noexcept {
  size_t armed = 0;
  for (; armed < queues.size(); ++armed) {
    const RxQueue& q = queues[armed];
    const int fd = q.port->arm_wakeup(q.queue);
    if (fd < 0) break;
    if (!fds.add(fd)) {
      q.port->disarm_wakeup(q.queue);
      break;
    }
  }
  if (armed == queues.size()) return armed;
  disarm_rx_wakeups(queues.first(armed));
  return 0;
}

}  // namespace vecflow::sched
