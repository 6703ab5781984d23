#include "datapath/pipeline_handler.h"

#include <algorithm>

#include <rte_prefetch.h>

#include "core/tracer.h"
#include "sched/event.h"

namespace vecflow {

static_assert(sched::kMaxEventBurst <= 256, "an event's index in its burst is a uint8_t tag");

PipelineHandler::PipelineHandler(Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot,
                                 std::vector<uint8_t> group_queue, sched::TxAdapter& tx)
    : pipeline_(pipeline),
      worker_(pipeline, outcomes, slot),
      group_queue_(std::move(group_queue)),
      tx_(tx) {
  for (size_t g = 0; g < group_queue_.size(); ++g) {
    queue_group_[group_queue_[g]] = static_cast<uint8_t>(g);
    group_ordered_.push_back(g < pipeline_.groups().size() &&
                             pipeline_.groups()[g].sched == SchedType::Ordered);
  }
}

void PipelineHandler::process(std::span<rte_event> events) noexcept {
  // An event waited in the scheduler's rings behind up to thousands of others, so its vector
  // and mbufs are cold: the burst's vectors are fetched first, then each gathered packet's
  // mbuf as its pointer is read, so that the lines arrive while the rest is gathered.
  for (const rte_event& ev : events) {
    if (sched::is_vector(ev)) rte_prefetch0(ev.vec);
  }
  const size_t n = events.size();
  size_t first = 0;
  while (first < n) {
    if (sched::packets(events[first]).empty()) {
      ++first;  // nothing to run (a CPU event): it is finished as it is
      continue;
    }
    const uint8_t group = queue_group_[events[first].queue_id];
    size_t npkts = 0;
    size_t last = first;
    uint8_t traced = 0;
    for (; last < n; ++last) {
      rte_event& ev = events[last];
      std::span<rte_mbuf*> pkts = sched::packets(ev);
      if (pkts.empty()) continue;
      if (queue_group_[ev.queue_id] != group) break;
      if (npkts > 0 && (npkts >= kGatherPackets || npkts + pkts.size() > pkts_.size())) break;
      traced |= ev.sub_event_type;
      for (rte_mbuf* m : pkts) {
        // Both lines of the mbuf the stages read (fields, then l2/l3 lengths and PacketMeta);
        // the first stage prefetches the headers once these have arrived.
        rte_prefetch0(m);
        rte_prefetch0(reinterpret_cast<char*>(m) + RTE_CACHE_LINE_SIZE);
        pkts_[npkts] = m;
        tags_[npkts] = static_cast<uint8_t>(last);
        ++npkts;
      }
    }
    if (traced) [[unlikely]]
      trace_dequeued(events.subspan(first, last - first));
    run_gathered(events, first, last, npkts, traced != 0);
    first = last;
  }
}

void PipelineHandler::trace_dequeued(std::span<rte_event> events) noexcept {
  for (rte_event& ev : events) {
    if (ev.sub_event_type != trace::kEventTraced) continue;
    const std::span<rte_mbuf*> pkts = sched::packets(ev);
    for (rte_mbuf* m : pkts) {
      if (!trace::marked(m)) continue;
      trace::Record r;
      r.step = trace::Step::Dequeue;
      r.queue = ev.queue_id;
      r.index = static_cast<uint16_t>(ev.flow_id);
      r.value = static_cast<uint32_t>(pkts.size());
      r.extra = ev.sched_type;
      trace::tracer().add(m, r);
    }
  }
}

void PipelineHandler::run_gathered(std::span<rte_event> events, size_t first, size_t last,
                                   size_t npkts, bool traced) noexcept {
  const uint8_t group = queue_group_[events[first].queue_id];
  const GroupOutput r = worker_.run(group, {pkts_.data(), npkts}, tags_.data(), decided_.data(),
                                    decided_tags_.data(), *this, traced);
  const bool ordered = group_ordered_[group];
  // Unordered: the decided packets leave now, in the order the events came.
  if (!ordered && r.decided > 0) tx_.take({decided_.data(), r.decided});

  size_t c = 0;  // cursor into the packets going on (pkts_), in event order
  size_t d = 0;  // cursor into the decided packets (decided_), ordered groups only
  for (size_t e = first; e < last; ++e) {
    rte_event& ev = events[e];
    std::span<rte_mbuf*> pkts = sched::packets(ev);
    if (pkts.empty()) continue;
    const size_t c0 = c;
    while (c < r.go_on && tags_[c] == e)
      ++c;
    const size_t d0 = d;
    if (ordered) {
      while (d < r.decided && decided_tags_[d] == e)
        ++d;
    }
    size_t count;
    if (c > c0) {
      // On to the next group with the undecided packets; the decided ones leave now.
      if (d > d0) tx_.take({decided_.data() + d0, d - d0});
      std::copy(pkts_.begin() + c0, pkts_.begin() + c, pkts.begin());
      count = c - c0;
      sched::forward_to(ev, group_queue_[group + 1]);
    } else {
      // Finished: an ordered group's decided packets go back into the event for the Worker.
      std::copy(decided_.begin() + d0, decided_.begin() + d, pkts.begin());
      count = d - d0;
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
