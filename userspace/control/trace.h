// `vecflowctl trace`: follow the next packets that match a filter through every step of the
// data path (core/tracer.h), and show each step in words.
//
//   trace action=add count=N [port=NAME] [filter=EXPR]   arm: the next N packets received on
//                                                         the port (any port) that match
//   trace action=show                                     the steps recorded so far
//   trace action=clear                                    disarm and forget
//
// Arming installs a marking hook on the rx queues of the chosen ports and a recording hook on
// every port's tx queues; nothing of the trace runs on the data path before that, nor after
// `clear`. Once N packets are taken the rx hooks are removed at once (the control thread
// checks every kCheckInterval); the tx hooks stay until every taken packet left or kLinger
// passed, so that the packets still in flight are followed to the end.
//
// The control thread only: nothing here is called from the data path.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/registry.h"
#include "control/server.h"
#include "core/error.h"
#include "core/ids.h"
#include "core/tracer.h"

struct rte_bpf;

namespace vecflow::control {

// Implemented by the part that owns the rx/tx hook points.
class TraceTap {
 public:
  virtual ~TraceTap() = default;
  // Installs the marking hook (trace::Tracer::mark) on every rx queue of `ports`, and the
  // recording hook on every tx queue of every port.
  virtual Result<void> attach_trace(const std::vector<PortId>& ports) = 0;
  // Removes the marking hooks; once it returns no lcore marks a packet.
  virtual void detach_trace_rx() noexcept = 0;
  // Removes every trace hook.
  virtual void detach_trace() noexcept = 0;
};

// What the steps are shown with: names for the numbers the data path records.
struct TraceNames {
  std::vector<std::string> ports;   // by PortId
  std::vector<std::string> stages;  // by stage index
  std::vector<std::string> queues;  // by scheduler queue: the stage group it serves
  // A next hop's address for a neighbour id; empty when unknown.
  std::function<std::string(uint32_t)> nexthop;
};

// One step of a traced packet in words (tests read these).
std::string describe_step(const trace::Record& r, const TraceNames& names);
// Ethernet, IP and transport header of a frame in one line ("IPv4 UDP 10.0.0.1:5 > ...").
std::string summarize_frame(const uint8_t* frame, size_t len);

class TraceManager {
 public:
  static constexpr std::chrono::milliseconds kCheckInterval{20};
  static constexpr std::chrono::milliseconds kLinger{2000};

  TraceManager(ControlServer& server, TraceTap& tap, TraceNames names);
  ~TraceManager();  // removes the hooks
  TraceManager(const TraceManager&) = delete;
  TraceManager& operator=(const TraceManager&) = delete;

  void register_commands(Registry& registry);
  // The ports after a reload added or removed some (names by PortId, "" for none).
  void set_port_names(std::vector<std::string> ports) { names_.ports = std::move(ports); }

  Result<Json> add(uint32_t count, const std::string& port, const std::string& filter);
  Json show() const;
  void clear() noexcept;
  // Whether packets are being marked for a trace now.
  bool active() const noexcept { return rx_hooked_; }

 private:
  void schedule_check();
  void check();
  void free_filter() noexcept;

  ControlServer& server_;
  TraceTap& tap_;
  TraceNames names_;
  trace::Tracer& tracer_;
  std::unique_ptr<ScheduledCall> check_call_;
  rte_bpf* filter_ = nullptr;
  bool rx_hooked_ = false;
  bool tx_hooked_ = false;
  std::string port_;
  std::string filter_text_;
  std::chrono::steady_clock::time_point done_at_{};
};

}  // namespace vecflow::control
