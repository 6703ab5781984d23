#include "hooks/hook_table.h"

#include <algorithm>
#include <unordered_set>

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
  return remove(std::span<const HookId>(&id, 1));
}

Result<void> HookTable::remove(std::span<const HookId> ids) {
  if (ids.empty()) return {};
  std::lock_guard lock(mutex_);
  const std::unordered_set<HookId> gone(ids.begin(), ids.end());
  // The ids found, before anything is replaced: all or none.
  std::unordered_set<HookId> found;
  for (size_t s = 0; s < 2 * size_t(ports_) * queues_; ++s) {
    const List* cur = lists_[s].load(std::memory_order_relaxed);
    for (size_t i = 0; cur != nullptr && i < cur->count; ++i)
      if (gone.contains(cur->ids[i])) found.insert(cur->ids[i]);
  }
  if (found.size() != gone.size()) {
    for (HookId id : gone)
      if (!found.contains(id)) return fail("no hook {}", id);
  }
  std::vector<std::unique_ptr<List>> retired;
  for (size_t s = 0; s < 2 * size_t(ports_) * queues_; ++s) {
    const List* cur = lists_[s].load(std::memory_order_relaxed);
    if (cur == nullptr) continue;
    size_t keep = 0;
    auto next = std::make_unique<List>();
    next->where = cur->where;
    for (size_t i = 0; i < cur->count; ++i) {
      if (gone.contains(cur->ids[i])) continue;
      next->hooks[keep] = cur->hooks[i];
      next->ids[keep++] = cur->ids[i];
    }
    if (keep == cur->count) continue;
    next->count = keep;
    retired.emplace_back(
        lists_[s].exchange(keep ? next.release() : nullptr, std::memory_order_acq_rel));
  }
  // One grace period covers every list replaced above: after it no lcore holds any of them,
  // and none can reach a removed hook through the new lists.
  qsbr_.synchronize();
  installed_ -= gone.size();
  return {};
}

size_t HookTable::installed() const {
  std::lock_guard lock(mutex_);
  return installed_;
}

}  // namespace vecflow
