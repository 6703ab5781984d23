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
  const bool ticked = handler_.tick();
  rte_event ev[kMaxEventBurst];
  const uint16_t n = port_.dequeue_burst(ev, burst_);
  if (n == 0) {
    if (ticked) sink_.flush();
    return ticked;
  }
  stats_.events.add(n);

  // The handler never sees events back from the egress queue (they were finished at an
  // ordered stage and the scheduler has put them back in order). Devices match each
  // FORWARD/RELEASE to the dequeued event in the same position (event_sw restores order
  // that way), so the burst goes back in dequeue order: the handler works on a copy of
  // the other events and its decisions are written back in place.
  if (egress_ < 0) {
    for (uint16_t i = 0; i < n; ++i)
      ev[i].op = RTE_EVENT_OP_RELEASE;
    handler_.process(std::span<rte_event>(ev, n));
  } else {
    rte_event work[kMaxEventBurst];
    uint8_t pos[kMaxEventBurst];
    uint16_t nw = 0;
    for (uint16_t i = 0; i < n; ++i) {
      ev[i].op = RTE_EVENT_OP_RELEASE;
      if (ev[i].queue_id != egress_) {
        pos[nw] = static_cast<uint8_t>(i);
        work[nw++] = ev[i];
      }
    }
    handler_.process(std::span<rte_event>(work, nw));
    for (uint16_t i = 0; i < nw; ++i)
      ev[pos[i]] = work[i];
  }

  rte_event done[kMaxEventBurst];
  uint16_t ndone = 0;
  uint16_t end = 0;               // one past the last event that goes on: the ops to enqueue
  uint16_t ndone_before_end = 0;  // RELEASE ops among them
  uint64_t forwarded = 0;
  uint64_t via_egress = 0;
  for (uint16_t i = 0; i < n; ++i) {
    rte_event& e = ev[i];
    if (e.op == RTE_EVENT_OP_FORWARD) {
      ++forwarded;
    } else if (egress_ >= 0 && e.queue_id != egress_ && types_[e.queue_id] == SchedType::Ordered) {
      forward_to(e, static_cast<uint8_t>(egress_));
      ++via_egress;
    } else {
      done[ndone++] = e;
      continue;
    }
    e.sched_type = static_cast<uint8_t>(types_[e.queue_id]);
    end = static_cast<uint16_t>(i + 1);
    ndone_before_end = ndone;
  }
  // Finished packets leave before the scheduler hears of it: a RELEASE frees the flow's
  // atomic context, and the flow's next event, on another worker, must not overtake them.
  if (ndone > 0) sink_.finish(std::span<rte_event>(done, ndone));
  sink_.flush();
  // Finished events after the last forward need no op: the next dequeue releases them.
  if (end > 0) send(ev, end, /*only_forwards=*/ndone_before_end == 0);
  stats_.forwarded.add(forwarded);
  stats_.via_egress.add(via_egress);
  stats_.finished.add(ndone);
  return true;
}

void Worker::send(rte_event* ev, uint16_t n, bool only_forwards) noexcept {
  // All FORWARD: the backend's forward path, which need not look at each op.
  auto enqueue = [&](rte_event* e, uint16_t k) {
    return only_forwards ? port_.enqueue_forward_burst(e, k) : port_.enqueue_burst(e, k);
  };
  uint16_t sent = enqueue(ev, n);
  for (uint32_t r = 0; sent < n && r < kForwardRetries; ++r) {
    rte_pause();
    sent += enqueue(ev + sent, static_cast<uint16_t>(n - sent));
  }
  if (sent == n) return;
  // The refused forwards are dropped; refused releases need nothing (the next dequeue
  // releases them).
  rte_event lost[kMaxEventBurst];
  uint16_t nlost = 0;
  for (uint16_t i = sent; i < n; ++i) {
    if (ev[i].op == RTE_EVENT_OP_FORWARD) lost[nlost++] = ev[i];
  }
  stats_.refused.add(nlost);
  sink_.drop(std::span<rte_event>(lost, nlost), DropReason::SCHED_BACKPRESSURE);
}

bool Worker::arm_wakeup(WakeFds& fds) noexcept {
  const int fd = port_.arm_wakeup();
  if (fd < 0) return false;
  if (!fds.add(fd)) {
    port_.disarm_wakeup();
    return false;
  }
  if (handler_.holding()) fds.wake_within_us(kHeldWakeUs);
  return true;
}

void Worker::disarm_wakeup() noexcept {
  port_.disarm_wakeup();
}

void Worker::park() noexcept {
  handler_.stop();
  sink_.flush();
  port_.park();
}

}  // namespace vecflow::sched
