#include "io/port.h"

#include <algorithm>

#include <fmt/format.h>

#include "io/kernel_path.h"

namespace vecflow {

std::string_view to_string(LinkState s) noexcept {
  switch (s) {
    case LinkState::Up:
      return "up";
    case LinkState::Down:
      return "down";
    case LinkState::Unknown:
      break;
  }
  return "unknown";
}

std::string_view to_string(CopyMode m) noexcept {
  return m == CopyMode::ZeroCopy ? "zero-copy" : "copy";
}

std::string_view to_string(WakeMode m) noexcept {
  return m == WakeMode::Polling ? "polling" : "interrupt";
}

Port::Port(std::string name, PortId id) : name_(std::move(name)), id_(id) {}

Port::~Port() = default;

std::optional<LinkState> Port::refresh_link() noexcept {
  LinkState now = link_state();
  if (link_.exchange(now, std::memory_order_relaxed) == now) return std::nullopt;
  return now;
}

void Port::size_counters(uint16_t rx_queues, uint16_t tx_queues) {
  rx_counters_ = std::make_unique<RxQueueCounters[]>(rx_queues);
  tx_counters_ = std::make_unique<TxQueueCounters[]>(tx_queues);
  counted_rx_ = rx_queues;
  counted_tx_ = tx_queues;
}

int Port::arm_wakeup(uint16_t) noexcept {
  return -1;
}

void Port::disarm_wakeup(uint16_t) noexcept {}

uint16_t Port::to_kernel(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept {
  if (!kernel_ || n == 0) return 0;
  uint64_t bytes = 0;
  uint16_t sent = kernel_->send(static_cast<uint16_t>(q % kernel_->queues()), pkts, n, bytes);
  TxQueueCounters& c = tx_counters_[q];
  c.to_kernel.add(sent);
  c.to_kernel_bytes.add(bytes);
  return sent;
}

Result<void> Port::enable_kernel_path(std::string tap_name) {
  if (kernel_) return fail("port {}: the kernel path exists already ({})", name_, kernel_->name());
  if (tap_name.empty()) tap_name = fmt::format("vfk{}-{}", to_index(id_), name_).substr(0, 15);
  uint16_t queues = std::max<uint16_t>(tx_queue_count(), 1);
  auto kp = KernelPath::create(tap_name, queues, mac());
  if (!kp) return fail("port {}: {}", name_, kp.error().message);
  kernel_ = std::move(*kp);
  return {};
}

PortStatus Port::base_status() const {
  PortStatus s;
  s.name = name_;
  s.kind = std::string(kind());
  s.id = id_;
  s.link = link_state();
  s.mac = mac();
  if (kernel_) s.kernel_path = kernel_->name();
  uint16_t n = std::max(counted_rx_, counted_tx_);
  for (uint16_t q = 0; q < n; ++q) {
    QueueStatus qs;
    qs.index = q;
    qs.device_queue = q;
    if (q < counted_rx_) {
      const RxQueueCounters& r = rx_counters_[q];
      qs.rx_packets = r.packets.load();
      qs.rx_bytes = r.bytes.load();
      qs.sleeps = r.sleeps.load();
      qs.wake =
          r.sleeping.load(std::memory_order_relaxed) ? WakeMode::Interrupt : WakeMode::Polling;
      for (size_t i = 0; i < kDropReasonCount; ++i) {
        auto reason = static_cast<DropReason>(i);
        if (uint64_t v = r.drops.load(reason)) qs.drops.emplace_back(reason, v);
      }
    }
    if (q < counted_tx_) {
      const TxQueueCounters& t = tx_counters_[q];
      qs.tx_packets = t.packets.load();
      qs.tx_bytes = t.bytes.load();
      qs.tx_refused = t.refused.load();
      qs.tx_copies = t.copies.load();
      qs.to_kernel = t.to_kernel.load();
      qs.to_kernel_bytes = t.to_kernel_bytes.load();
    }
    s.queues.push_back(std::move(qs));
  }
  return s;
}

PortStatus Port::status() const {
  return base_status();
}

}  // namespace vecflow
