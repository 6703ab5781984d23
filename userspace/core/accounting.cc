#include "core/accounting.h"

#include <fmt/format.h>

namespace vecflow {

void AccountingSnapshot::add(const PortOutcomes& o) noexcept {
  rx += o.rx_packets.load();
  tx += o.tx_packets.load();
  to_kernel += o.kernel_packets.load();
  // Given back before taken: read in that order, a packet given back is seen taken too, so
  // the difference is never negative.
  const uint64_t unheld = o.unheld.load();
  held += o.held.load() - unheld;
  for (size_t i = 0; i < kDropReasonCount; ++i)
    drops[i] += o.drops.load(static_cast<DropReason>(i));
}

void AccountingSnapshot::add(const AccountingSnapshot& o) noexcept {
  rx += o.rx;
  tx += o.tx;
  to_kernel += o.to_kernel;
  held += o.held;
  for (size_t i = 0; i < kDropReasonCount; ++i)
    drops[i] += o.drops[i];
}

uint64_t AccountingSnapshot::dropped() const noexcept {
  uint64_t sum = 0;
  for (auto d : drops)
    sum += d;
  return sum;
}

std::string AccountingSnapshot::to_string() const {
  std::string s = fmt::format("rx={} tx={} to_kernel={}", rx, tx, to_kernel);
  if (held != 0) s += fmt::format(" held={}", held);
  s += " drops={";
  bool first = true;
  for (size_t i = 0; i < kDropReasonCount; ++i) {
    if (drops[i] == 0) continue;
    s += fmt::format("{}{}:{}", first ? "" : ",", drop_reason_name(static_cast<DropReason>(i)),
                     drops[i]);
    first = false;
  }
  return s + "}";
}

OutcomeTable::OutcomeTable(size_t lcore_slots, size_t ports)
    : slots_(lcore_slots), ports_(ports), cells_(new PortOutcomes[lcore_slots * ports]) {}

AccountingSnapshot OutcomeTable::port_snapshot(PortId port) const noexcept {
  AccountingSnapshot s;
  for (size_t l = 0; l < slots_; ++l)
    s.add(cells_[l * ports_ + static_cast<size_t>(port)]);
  return s;
}

AccountingSnapshot OutcomeTable::total_snapshot() const noexcept {
  AccountingSnapshot s;
  for (size_t i = 0; i < slots_ * ports_; ++i)
    s.add(cells_[i]);
  return s;
}

}  // namespace vecflow
