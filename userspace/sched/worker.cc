#include "sched/worker.h"

#include <algorithm>

#include <rte_pause.h>

namespace vecflow::sched {

Worker::Worker(std::string name, Scheduler& sched, EventPort& port, EventHandler& handler,
               EgressSink& sink, std::optional<uint8_t> egress_queue, uint16_t burst)
    : Service(std::move(name)),
      port_(port),
      handler_(handler),
      sink_(sink),
      types_(sched.queue_types()),
      egress_(egress_queue ? *egress_queue : -1),
      burst_(std::clamp<uint16_t>(burst, 1, kMaxEventBurst)) {}

bool Worker::poll() noexcept {
  rte_event ev[kMaxEventBurst];
  const uint16_t n = port_.dequeue_burst(ev, burst_);
  if (n == 0) return false;
  stats_.events.add(n);

  // Events back from the egress queue skip the handler: they were finished at an ordered
  // stage and the scheduler has put them back in order.
  rte_event done[kMaxEventBurst];
  uint16_t ndone = 0;
  uint16_t nh = 0;
  if (egress_ >= 0) {
    for (uint16_t i = 0; i < n; ++i) {
      if (ev[i].queue_id == egress_) {
        done[ndone++] = ev[i];
      } else {
        ev[nh++] = ev[i];
      }
    }
  } else {
    nh = n;
  }
  for (uint16_t i = 0; i < nh; ++i)
    ev[i].op = RTE_EVENT_OP_RELEASE;

  handler_.process(std::span<rte_event>(ev, nh));

  rte_event fwd[kMaxEventBurst];
  uint16_t nfwd = 0;
  uint64_t via_egress = 0;
  for (uint16_t i = 0; i < nh; ++i) {
    rte_event& e = ev[i];
    if (e.op == RTE_EVENT_OP_FORWARD) {
      fwd[nfwd++] = e;
    } else if (egress_ >= 0 && types_[e.queue_id] == SchedType::Ordered) {
      forward_to(e, static_cast<uint8_t>(egress_));
      fwd[nfwd++] = e;
      ++via_egress;
    } else {
      done[ndone++] = e;
    }
  }
  for (uint16_t i = 0; i < nfwd; ++i)
    fwd[i].sched_type = static_cast<uint8_t>(types_[fwd[i].queue_id]);
  if (nfwd > 0) send_forwards(fwd, nfwd);
  if (ndone > 0) sink_.finish(std::span<rte_event>(done, ndone));
  sink_.flush();
  stats_.forwarded.add(nfwd - via_egress);
  stats_.via_egress.add(via_egress);
  stats_.finished.add(ndone);
  return true;
}

void Worker::send_forwards(rte_event* ev, uint16_t n) noexcept {
  uint16_t sent = port_.enqueue_forward_burst(ev, n);
  for (uint32_t r = 0; sent < n && r < kForwardRetries; ++r) {
    rte_pause();
    sent += port_.enqueue_forward_burst(ev + sent, static_cast<uint16_t>(n - sent));
  }
  if (sent < n) {
    stats_.refused.add(n - sent);
    sink_.drop(std::span<rte_event>(ev + sent, n - sent), DropReason::SCHED_BACKPRESSURE);
  }
}

void Worker::park() noexcept {
  sink_.flush();
  port_.park();
}

}  // namespace vecflow::sched
