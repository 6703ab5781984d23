// Sleeping on several port queues at once: one descriptor for a service that polls more than
// one queue (an rx adapter serving a port's queues, or several ports).
//
// runtime/service.h lets a service hand its lcore one descriptor to sleep on. A service polling
// N queues arms all of them (Port::arm_wakeup) and hands out one epoll descriptor that becomes
// readable when any of them does. Queues are added to the epoll set on every arm and removed on
// disarm: sleeps are rare (after cpu.interrupt_after_ms of idleness), and a queue's descriptor
// may change between sleeps (a vhost guest reconnecting), which a standing registration would
// miss.
//
// Threading: add() on the control thread before the service runs; arm()/disarm() on the
// service's lcore, as Service::arm_wakeup()/disarm_wakeup().
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace vecflow {

class Port;

class QueueWakeups {
 public:
  static Result<QueueWakeups> create();
  QueueWakeups(QueueWakeups&& o) noexcept;
  QueueWakeups& operator=(QueueWakeups&& o) noexcept;
  ~QueueWakeups();

  void add(Port* port, uint16_t queue);

  // Arms every queue and returns a descriptor readable when any of them has packets, or -1 if
  // one of them cannot be armed (then none stays armed and the lcore keeps napping).
  int arm() noexcept;
  // After the sleep: disarms every queue armed by the last arm().
  void disarm() noexcept;

 private:
  QueueWakeups() = default;
  struct Entry {
    Port* port;
    uint16_t queue;
    int fd;  // registered in the epoll set while armed, else -1
  };
  int epfd_ = -1;
  std::vector<Entry> queues_;
  size_t armed_ = 0;
};

}  // namespace vecflow
