// A hook that captures the bursts of the queues it is installed on into a pcapng file.
#pragma once

#include <memory>

#include "hooks/capture.h"
#include "hooks/hook_table.h"

namespace vecflow {

class CaptureHook final : public Hook {
 public:
  explicit CaptureHook(std::shared_ptr<PcapngCapture> capture) : capture_(std::move(capture)) {}

  void on_burst(const HookPoint& where, std::span<rte_mbuf* const> pkts) noexcept override {
    capture_->capture(
        pkts, where.direction == HookDirection::Rx ? CaptureDirection::In : CaptureDirection::Out,
        to_index(where.queue));
  }

  PcapngCapture& capture() noexcept { return *capture_; }

 private:
  std::shared_ptr<PcapngCapture> capture_;
};

}  // namespace vecflow
