// One named logger per subsystem ("steer", "io", "sched", ...), all writing to stderr.
//
// Under systemd (JOURNAL_STREAM set) each line starts with a syslog priority prefix ("<4>")
// that journald turns into the entry's priority; on a terminal lines carry time and colour.
// Formats are checked at compile time (fmt), and the level is tested before formatting.
// The data path does not log per packet; where it must report, it uses a RateLimiter.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string_view>

#include <spdlog/spdlog.h>

namespace vecflow::log {

// Sets the global level and output format. Safe to call more than once (tests, reload).
void init(spdlog::level::level_enum level);

// The logger of a subsystem, created on first use.
std::shared_ptr<spdlog::logger> get(std::string_view subsystem);

// A structured field of a log event: "port" = "wan".
struct Field {
  std::string_view key;
  std::string_view value;
};

// Logs `message` with fields an operator can filter on. Under journald (stderr is the journal
// stream) the entry carries them as VECFLOW_<KEY>=value fields (journalctl VECFLOW_PORT=wan);
// elsewhere they follow the message as key=value. Not for the data path.
void event(const std::shared_ptr<spdlog::logger>& logger, spdlog::level::level_enum level,
           std::string_view message, std::initializer_list<Field> fields);

// Lets at most `burst` events through per `period_ns`, for reports from hot paths.
// Single-threaded: each lcore owns its limiters.
class RateLimiter {
 public:
  RateLimiter(uint32_t burst, uint64_t period_ns) : burst_(burst), period_ns_(period_ns) {}
  // True if this event may be logged; counts suppressed ones so the next allowed line can
  // say how many were skipped.
  bool allow(uint64_t now_ns) noexcept;
  uint64_t take_suppressed() noexcept {
    uint64_t s = suppressed_;
    suppressed_ = 0;
    return s;
  }

 private:
  uint32_t burst_;
  uint64_t period_ns_;
  uint64_t window_start_ns_ = 0;
  uint32_t used_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace vecflow::log
