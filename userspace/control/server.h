// The control server: a runtime Service on the control lcore that serves the Registry over a
// unix socket (newline-delimited JSON, vecflow-control(7)) and, when configured, the
// Prometheus /metrics endpoint over HTTP. Both run on one Boost.Asio io_context that poll()
// steps without blocking; WakeSet (wake_set.h) lets the lcore sleep while nothing happens.
//
// Every handler runs on the control lcore's thread. Other threads reach it with post(); the
// SIGHUP handler with request_reload().
//
// The server also samples every registered collector once per kSampleInterval, keeping the last
// two samples for rates (RateWindow) and handing each sample to the sample listeners (the drop
// logger). That tick is the only periodic wake-up of an idle control lcore.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "api/registry.h"
#include "config/config.h"
#include "core/error.h"
#include "runtime/service.h"

namespace vecflow::control {

struct ServerOptions {
  std::string socket_path = "/run/vecflow/control.sock";
  uint32_t socket_mode = 0660;
  std::string group = "vecflow";  // owns the socket and may change state; ignored if absent
  std::string metrics_address;    // "127.0.0.1:9469"; empty: no metrics endpoint
  uint32_t max_request_bytes = 65536;
  uint32_t read_timeout_ms = 5000;
};

ServerOptions server_options(const config::ControlSection& c);

// A timer on the control thread; destroying or cancelling it before it fires drops the call.
class ScheduledCall {
 public:
  virtual ~ScheduledCall() = default;
  virtual void cancel() noexcept = 0;
};

class ControlServer final : public Service {
 public:
  // How often counters are sampled for rates and drop logs. One second is what `top` and
  // `ifstat` show: short enough for "is traffic flowing now", long enough that an idle control
  // lcore wakes once a second rather than continuously.
  static constexpr std::chrono::milliseconds kSampleInterval{1000};
  // Connections served at once. Each costs a descriptor and a request buffer; a client beyond
  // this gets a `busy` reply and is closed, so a runaway script cannot exhaust descriptors.
  static constexpr size_t kMaxConnections = 256;

  // Binds the socket (creating its directory, replacing a stale socket, refusing to steal one
  // a running vecflowd serves) and the metrics endpoint. Fails with the reason if either
  // cannot be bound; nothing is left behind then.
  static Result<std::shared_ptr<ControlServer>> create(const ServerOptions& options,
                                                       Registry& registry);
  ~ControlServer() override;  // closes every connection and removes the socket file

  bool poll() noexcept override;
  bool arm_wakeup(WakeFds& fds) noexcept override;

  // Any thread: runs `fn` on the control thread.
  void post(std::function<void()> fn);
  // Async-signal-safe: runs the reload handler on the control thread (SIGHUP).
  void request_reload() noexcept;
  void set_reload_handler(std::function<void()> handler);

  // Control thread: runs `fn` after `delay`.
  std::unique_ptr<ScheduledCall> schedule(std::chrono::milliseconds delay,
                                          std::function<void()> fn);
  // Control thread: runs `fn` on the control thread each time `fd` becomes readable, until
  // the returned handle is destroyed or cancelled. `fn` reads `fd` until it would block (the
  // lcore's wake-up is edge-triggered). The caller owns `fd` and keeps it open meanwhile.
  std::unique_ptr<ScheduledCall> on_readable(int fd, std::function<void()> fn);
  // Control thread: called with every periodic sample.
  void add_sample_listener(std::function<void(const Snapshot&)> listener);

  // Control thread: limits applied to connections from now on (reload).
  void set_limits(uint32_t max_request_bytes, uint32_t read_timeout_ms);

  const RateWindow& rates() const noexcept;
  const std::string& socket_path() const noexcept;
  // The bound metrics address ("127.0.0.1:9469"), empty when there is none.
  std::string metrics_endpoint() const;
  size_t connections() const noexcept;

  struct Impl;

 private:
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vecflow::control
