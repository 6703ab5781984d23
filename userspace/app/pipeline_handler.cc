#include "app/pipeline_handler.h"

#include <algorithm>

#include "sched/event.h"

namespace vecflow {

PipelineHandler::PipelineHandler(Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot,
                                 std::vector<uint8_t> group_queue, sched::TxAdapter& tx)
    : worker_(pipeline, outcomes, slot), group_queue_(std::move(group_queue)), tx_(tx) {
  for (size_t g = 0; g < group_queue_.size(); ++g)
    queue_group_[group_queue_[g]] = static_cast<uint8_t>(g);
}

// Decided packets of one event never outnumber its packets, which never exceed
// kMaxVectorPackets; the bound is checked anyway so that a broken invariant cannot write past
// the array (the packets then leave at once, out of the event's order).
void PipelineHandler::stage(std::span<rte_mbuf*> pkts) noexcept {
  if (staged_ + pkts.size() > decided_.size()) {
    tx_.take(pkts);
    return;
  }
  std::copy(pkts.begin(), pkts.end(), decided_.begin() + staged_);
  staged_ = static_cast<uint16_t>(staged_ + pkts.size());
}

void PipelineHandler::process(std::span<rte_event> events) noexcept {
  for (rte_event& ev : events) {
    std::span<rte_mbuf*> pkts = sched::packets(ev);
    if (pkts.empty()) continue;
    const uint8_t group = queue_group_[ev.queue_id];
    next_ = 0;
    staged_ = 0;
    worker_.run(group, pkts, *this);

    size_t count;
    if (next_ > 0) {
      // On to the next group with the undecided packets (run() packed them at the front).
      if (staged_) tx_.take({decided_.data(), staged_});
      count = next_;
      sched::forward_to(ev, group_queue_[group + 1]);
    } else {
      // Finished: the decided packets go back into the event for the Worker's sink.
      std::copy_n(decided_.begin(), staged_, pkts.begin());
      count = staged_;
    }
    if (sched::is_vector(ev)) {
      ev.vec->nb_elem = static_cast<uint16_t>(count);
    } else if (count == 0) {
      ev.event_type = RTE_EVENT_TYPE_CPU;
      ev.u64 = 0;
    }
  }
}

}  // namespace vecflow
