// The data path's hook points offered to `vecflowctl capture`: each capture becomes a
// CaptureHook (hooks/capture_hook.h) on every queue of its port, rx and tx as the capture asks
// (hooks/hook_table.h runs them from the rx and tx adapters; with no capture running they cost one
// pointer load per burst). The trace of `vecflowctl trace` is offered through the same hook points.
#pragma once

#include <memory>
#include <vector>

#include "control/capture.h"
#include "control/trace.h"
#include "core/tracer.h"
#include "hooks/capture_hook.h"
#include "hooks/hook_table.h"

namespace vecflow {

class HookTap final : public control::PacketTap, public control::TraceTap {
 public:
  HookTap(HookTable& hooks, uint16_t ports) : hooks_(hooks), ports_(ports) {}
  ~HookTap() override;

  // Control thread.
  Result<void> attach(PortId port, std::shared_ptr<PcapngCapture> capture) override;
  void detach(const PcapngCapture* capture) noexcept override;

  // `vecflowctl trace` (control/trace.h): the marking hook on the rx queues of the traced
  // ports, the recording hook on every tx queue.
  Result<void> attach_trace(const std::vector<PortId>& ports) override;
  void detach_trace_rx() noexcept override;
  void detach_trace() noexcept override;

 private:
  struct TraceRx final : Hook {
    void on_burst(const HookPoint& where, std::span<rte_mbuf* const> pkts) noexcept override {
      trace::tracer().mark(pkts, to_index(where.port), to_index(where.queue));
    }
  };
  struct TraceTx final : Hook {
    void on_burst(const HookPoint& where, std::span<rte_mbuf* const> pkts) noexcept override {
      for (rte_mbuf* m : pkts) {
        if (!trace::marked(m)) continue;
        trace::Record r;
        r.step = trace::Step::Tx;
        r.port = to_index(where.port);
        r.queue = to_index(where.queue);
        trace::tracer().add(m, r);
      }
    }
  };

  struct Tapped {
    explicit Tapped(std::shared_ptr<PcapngCapture> capture) : hook(std::move(capture)) {}
    CaptureHook hook;
    std::vector<HookTable::HookId> ids;
  };

  HookTable& hooks_;
  uint16_t ports_;
  std::vector<std::unique_ptr<Tapped>> tapped_;
  TraceRx trace_rx_;
  TraceTx trace_tx_;
  std::vector<HookTable::HookId> trace_rx_ids_;
  std::vector<HookTable::HookId> trace_tx_ids_;
};

}  // namespace vecflow
