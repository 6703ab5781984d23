// The data path's hook points offered to `vecflowctl capture`: each capture sink becomes a hook
// on every queue of its port, rx and tx as the sink asks (hooks/hook_table.h runs them from the
// rx and tx adapters; with no capture running they cost one pointer load per burst).
#pragma once

#include <memory>
#include <vector>

#include "control/capture.h"
#include "hooks/hook_table.h"

namespace vecflow {

class HookTap final : public control::PacketTap {
 public:
  explicit HookTap(HookTable& hooks) : hooks_(hooks) {}
  ~HookTap() override;

  // Control thread.
  Result<void> attach(std::shared_ptr<CaptureSink> sink) override;
  void detach(const CaptureSink* sink) noexcept override;

 private:
  struct Tapped final : Hook {
    std::shared_ptr<CaptureSink> sink;
    std::vector<HookTable::HookId> ids;
    void on_burst(const HookPoint& where, std::span<rte_mbuf* const> pkts) noexcept override {
      sink->offer(pkts.data(), static_cast<uint16_t>(pkts.size()),
                  where.direction == HookDirection::Rx ? kCaptureRx : kCaptureTx,
                  to_index(where.queue));
    }
  };

  HookTable& hooks_;
  std::vector<std::unique_ptr<Tapped>> tapped_;
};

}  // namespace vecflow
