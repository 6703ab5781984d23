// The hook that feeds a capture (hooks/pcapng_capture.h) from the rx or tx bursts of the queues it
// is installed on: `vecflowctl capture` installs one per port and direction (app/hook_tap.h). Each
// copy is filed under the hook point's port and carries its direction.
#pragma once

#include <memory>

#include "hooks/hook_table.h"
#include "hooks/pcapng_capture.h"

namespace vecflow {

class CaptureHook final : public Hook {
 public:
  explicit CaptureHook(std::shared_ptr<PcapngCapture> capture) : capture_(std::move(capture)) {}

  void on_burst(const HookPoint& where, std::span<rte_mbuf* const> pkts) noexcept override {
    capture_->capture(pkts, where.direction == HookDirection::Rx ? kCaptureRx : kCaptureTx,
                      where.port);
  }

  PcapngCapture& capture() noexcept { return *capture_; }

 private:
  std::shared_ptr<PcapngCapture> capture_;
};

}  // namespace vecflow
