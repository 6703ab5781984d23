#include "app/hook_tap.h"

#include <algorithm>

namespace vecflow {

HookTap::~HookTap() {
  while (!tapped_.empty())
    detach(tapped_.back()->sink.get());
}

Result<void> HookTap::attach(std::shared_ptr<CaptureSink> sink) {
  auto t = std::make_unique<Tapped>();
  t->sink = std::move(sink);
  for (auto [dir, flag] :
       {std::pair{HookDirection::Rx, kCaptureRx}, std::pair{HookDirection::Tx, kCaptureTx}}) {
    if (!t->sink->wants(flag)) continue;
    auto id = hooks_.add(dir, t->sink->port(), std::nullopt, *t);
    if (!id) {
      for (auto installed : t->ids)
        (void)hooks_.remove(installed);
      return std::unexpected(id.error());
    }
    t->ids.push_back(*id);
  }
  tapped_.push_back(std::move(t));
  return {};
}

void HookTap::detach(const CaptureSink* sink) noexcept {
  auto it = std::find_if(tapped_.begin(), tapped_.end(),
                         [&](const auto& t) { return t->sink.get() == sink; });
  if (it == tapped_.end()) return;
  // remove() returns once no lcore can be inside the hook: the sink may then go.
  for (auto id : (*it)->ids)
    (void)hooks_.remove(id);
  tapped_.erase(it);
}

}  // namespace vecflow
