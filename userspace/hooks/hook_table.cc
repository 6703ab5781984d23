#include "hooks/hook_table.h"

#include <algorithm>

namespace vecflow {

HookTable::HookTable(Qsbr& qsbr, uint16_t ports, uint16_t queues)
    : qsbr_(qsbr),
      ports_(ports),
      queues_(queues),
      lists_(new std::atomic<List*>[2 * size_t(ports) * queues]) {
  for (size_t i = 0; i < 2 * size_t(ports) * queues; ++i)
    lists_[i].store(nullptr, std::memory_order_relaxed);
}

HookTable::~HookTable() {
  for (size_t i = 0; i < 2 * size_t(ports_) * queues_; ++i)
    delete lists_[i].load(std::memory_order_relaxed);
}

Result<HookTable::HookId> HookTable::add(HookDirection direction, PortId port,
                                         std::optional<QueueId> queue, Hook& hook) {
  if (to_index(port) >= ports_) return fail("no port {} to hook", to_index(port));
  if (queue && to_index(*queue) >= queues_)
    return fail("port {} has no queue {} to hook", to_index(port), to_index(*queue));
  std::lock_guard lock(mutex_);
  uint16_t first = queue ? to_index(*queue) : 0;
  uint16_t last = queue ? first : static_cast<uint16_t>(queues_ - 1);
  for (uint16_t q = first; q <= last; ++q) {
    const List* cur = lists_[slot(direction, port, QueueId{q})].load(std::memory_order_relaxed);
    if (cur != nullptr && cur->count == kMaxHooksPerQueue)
      return fail("port {} queue {} already has {} hooks", to_index(port), q, kMaxHooksPerQueue);
  }
  HookId id = next_id_++;
  std::vector<std::unique_ptr<List>> retired;
  for (uint16_t q = first; q <= last; ++q) {
    auto& cell = lists_[slot(direction, port, QueueId{q})];
    const List* cur = cell.load(std::memory_order_relaxed);
    auto next = std::make_unique<List>(cur ? *cur : List{});
    next->where = HookPoint{port, QueueId{q}, direction};
    next->hooks[next->count] = &hook;
    next->ids[next->count] = id;
    ++next->count;
    // The list is complete before it is published (release); the old one may still be read.
    retired.emplace_back(cell.exchange(next.release(), std::memory_order_acq_rel));
  }
  if (std::any_of(retired.begin(), retired.end(), [](const auto& l) { return l != nullptr; }))
    qsbr_.synchronize();
  ++installed_;
  return id;
}

Result<void> HookTable::remove(HookId id) {
  std::lock_guard lock(mutex_);
  std::vector<std::unique_ptr<List>> retired;
  for (size_t s = 0; s < 2 * size_t(ports_) * queues_; ++s) {
    const List* cur = lists_[s].load(std::memory_order_relaxed);
    if (cur == nullptr) continue;
    size_t keep = 0;
    auto next = std::make_unique<List>();
    next->where = cur->where;
    for (size_t i = 0; i < cur->count; ++i) {
      if (cur->ids[i] == id) continue;
      next->hooks[keep] = cur->hooks[i];
      next->ids[keep++] = cur->ids[i];
    }
    if (keep == cur->count) continue;
    next->count = keep;
    retired.emplace_back(
        lists_[s].exchange(keep ? next.release() : nullptr, std::memory_order_acq_rel));
  }
  if (retired.empty()) return fail("no hook {}", id);
  // One grace period covers every list replaced above: after it no lcore holds any of them,
  // and none can reach the removed hook through the new lists.
  qsbr_.synchronize();
  --installed_;
  return {};
}

size_t HookTable::installed() const {
  std::lock_guard lock(mutex_);
  return installed_;
}

}  // namespace vecflow
