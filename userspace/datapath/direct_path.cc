#include "datapath/direct_path.h"

#include "hooks/hook_table.h"
#include "io/port.h"
#include "sched/rx_wakeup.h"
#include "sched/worker.h"

namespace vecflow {

DirectPath::DirectPath(std::string name, Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot,
                       sched::TxAdapter& tx, HookTable* hooks)
    : Service(std::move(name)),
      pipeline_(pipeline),
      worker_(pipeline, outcomes, slot),
      outcomes_(outcomes.row(slot)),
      tx_(tx),
      hooks_(hooks) {}

void DirectPath::add_queue(Port& port, uint16_t queue) {
  queues_.push_back(RxQueue{&port, queue, to_index(port.id())});
}

size_t DirectPath::receive(const RxQueue& q, bool& traced) noexcept {
  size_t n = 0;
  for (uint16_t b = 0; b < kDirectBursts; ++b) {
    rte_mbuf** burst = &pkts_[n];
    const uint16_t got = q.port->rx_burst(q.queue, burst, kDirectBurst);
    if (got > 0) {
      if (hooks_ && hooks_->run_rx(PortId{q.port_id}, QueueId{q.queue}, {burst, got}))
        traced = true;
      if (q.port->vlans() != nullptr) [[unlikely]] {
        charge_rx_each(outcomes_, burst, got);
      } else {
        uint64_t bytes = 0;
        for (uint16_t i = 0; i < got; ++i)
          bytes += burst[i]->pkt_len;
        PortOutcomes& o = outcomes_[q.port_id];
        o.rx_packets.add(got);
        o.rx_bytes.add(bytes);
      }
      n += got;
    }
    if (got < kDirectBurst) break;  // empty for now
  }
  return n;
}

void DirectPath::run(size_t n, bool traced) noexcept {
  stats_.packets.add(n);
  stats_.runs.add();
  std::span<rte_mbuf*> pkts(pkts_.data(), n);
  const size_t groups = pipeline_.groups().size();
  for (size_t g = 0; g < groups && !pkts.empty(); ++g) {
    const GroupOutput r = worker_.run(g, pkts, nullptr, decided_.data(), nullptr, *this, traced);
    if (r.decided > 0) tx_.take({decided_.data(), r.decided});
    pkts = pkts.first(r.go_on);
  }
}

bool DirectPath::poll() noexcept {
  bool worked = worker_.tick(*this);
  for (const RxQueue& q : queues_) {
    bool traced = false;
    const size_t n = receive(q, traced);
    if (n == 0) continue;
    run(n, traced);
    worked = true;
  }
  if (worked) tx_.flush();
  return worked;
}

bool DirectPath::arm_wakeup(WakeFds& fds) noexcept {
  armed_ = sched::arm_rx_wakeups(std::span<const RxQueue>(queues_), fds);
  if (armed_ != queues_.size()) return false;
  if (worker_.holding()) fds.wake_within_us(sched::kHeldWakeUs);
  return true;
}

void DirectPath::disarm_wakeup() noexcept {
  sched::disarm_rx_wakeups(std::span<const RxQueue>(queues_.data(), armed_));
  armed_ = 0;
}

void DirectPath::park() noexcept {
  worker_.stop(*this);
  tx_.flush();
}

}  // namespace vecflow
