#include "app/pipeline_handler.h"

#include <algorithm>

#include <rte_prefetch.h>

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

namespace {

// Prefetch distances, in events: a vector's packets are fetched this far ahead of the event
// running, their headers half as far (the header's address is read from the fetched mbuf).
constexpr size_t kPrefetchMbufs = 6;
constexpr size_t kPrefetchHeaders = 3;
// Packets of one event prefetched ahead: a large vector's later packets are reached while the
// stages work on its first ones.
constexpr size_t kPrefetchPackets = 8;

// The mbuf's two lines a stage reads first: its fields, then the metadata in its dynamic field.
void prefetch_mbufs(rte_event& ev) noexcept {
  std::span<rte_mbuf*> pkts = sched::packets(ev);
  for (size_t i = 0; i < std::min(pkts.size(), kPrefetchPackets); ++i) {
    rte_prefetch0(pkts[i]);
    rte_prefetch0(reinterpret_cast<char*>(pkts[i]) + RTE_CACHE_LINE_SIZE);
  }
}

void prefetch_headers(rte_event& ev) noexcept {
  std::span<rte_mbuf*> pkts = sched::packets(ev);
  for (size_t i = 0; i < std::min(pkts.size(), kPrefetchPackets); ++i)
    rte_prefetch0(rte_pktmbuf_mtod(pkts[i], char*));
}

}  // namespace

void PipelineHandler::process(std::span<rte_event> events) noexcept {
  // An event waited in the scheduler's rings behind up to thousands of others, so its vector,
  // mbufs and headers are cold; with many flows vectors hold a packet or two and every event
  // would stall on them in turn (the first mbuf read was ~70% of the route stage's cycles
  // with 1024 flows). Each level is fetched far enough ahead for the level before it to have
  // arrived: the burst's vectors first, then mbufs, then headers.
  const size_t n = events.size();
  for (const rte_event& ev : events) {
    if (sched::is_vector(ev)) rte_prefetch0(ev.vec);
  }
  for (size_t i = 0; i < std::min(kPrefetchMbufs, n); ++i)
    prefetch_mbufs(events[i]);
  for (size_t i = 0; i < std::min(kPrefetchHeaders, n); ++i)
    prefetch_headers(events[i]);
  for (size_t e = 0; e < n; ++e) {
    if (e + kPrefetchMbufs < n) prefetch_mbufs(events[e + kPrefetchMbufs]);
    if (e + kPrefetchHeaders < n) prefetch_headers(events[e + kPrefetchHeaders]);
    rte_event& ev = events[e];
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
