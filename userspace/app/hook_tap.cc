#include "app/hook_tap.h"

#include <algorithm>

namespace vecflow {

HookTap::~HookTap() {
  detach_trace();
  while (!tapped_.empty())
    detach(&tapped_.back()->hook.capture());
}

Result<void> HookTap::attach_trace(const std::vector<PortId>& ports) {
  detach_trace();
  auto install = [&](HookDirection dir, PortId port, Hook& hook,
                     std::vector<HookTable::HookId>& ids) -> Result<void> {
    auto id = hooks_.add(dir, port, std::nullopt, hook);
    if (!id) return std::unexpected(id.error());
    ids.push_back(*id);
    return {};
  };
  // Tx first: a packet marked at rx finds its tx hook in place.
  for (uint16_t p = 0; p < ports_; ++p) {
    if (auto r = install(HookDirection::Tx, PortId{p}, trace_tx_, trace_tx_ids_); !r) {
      detach_trace();
      return r;
    }
  }
  for (PortId p : ports) {
    if (auto r = install(HookDirection::Rx, p, trace_rx_, trace_rx_ids_); !r) {
      detach_trace();
      return r;
    }
  }
  return {};
}

void HookTap::detach_trace_rx() noexcept {
  // remove() returns once no lcore can be inside the hooks.
  (void)hooks_.remove(trace_rx_ids_);
  trace_rx_ids_.clear();
}

void HookTap::detach_trace() noexcept {
  detach_trace_rx();
  (void)hooks_.remove(trace_tx_ids_);
  trace_tx_ids_.clear();
}

Result<void> HookTap::attach(PortId port, std::shared_ptr<PcapngCapture> capture) {
  auto t = std::make_unique<Tapped>(std::move(capture));
  for (auto [dir, flag] :
       {std::pair{HookDirection::Rx, kCaptureRx}, std::pair{HookDirection::Tx, kCaptureTx}}) {
    if (!t->hook.capture().wants(flag)) continue;
    auto id = hooks_.add(dir, port, std::nullopt, t->hook);
    if (!id) {
      (void)hooks_.remove(t->ids);
      return std::unexpected(id.error());
    }
    t->ids.push_back(*id);
  }
  tapped_.push_back(std::move(t));
  return {};
}

void HookTap::detach(const PcapngCapture* capture) noexcept {
  auto it = std::find_if(tapped_.begin(), tapped_.end(),
                         [&](const auto& t) { return &t->hook.capture() == capture; });
  if (it == tapped_.end()) return;
  // remove() returns once no lcore can be inside the hook: the capture may then go.
  (void)hooks_.remove((*it)->ids);
  tapped_.erase(it);
}

}  // namespace vecflow
