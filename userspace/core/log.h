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
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace vecflow::log {

// Sets the global level and output format. Safe to call more than once (tests, reload).
void init(spdlog::level::level_enum level);

// The subsystems that log, each with its own logger and level.
inline constexpr std::string_view kSubsystems[] = {
    "app", "control", "io", "sched", "runtime", "pipeline", "dpdk", "steer", "drops"};

// The logger of a subsystem, created on first use.
std::shared_ptr<spdlog::logger> get(std::string_view subsystem);

// Sets one subsystem's level at run time (`vecflowctl log level`), until the next set, reload
// of the logging section, or restart. False for a name not in kSubsystems.
bool set_level(std::string_view subsystem, spdlog::level::level_enum level);
// Every subsystem with its level now.
std::vector<std::pair<std::string, spdlog::level::level_enum>> levels();
// The last lines logged (at most `max`, oldest first), kept in memory whatever the output is,
// for `vecflowctl log show`. The ring holds kRecentLines.
inline constexpr size_t kRecentLines = 1000;
std::vector<std::string> recent_lines(size_t max);

// A condition the control thread finds again and again (an interface that vanished, a resource
// that stays unavailable): report() says whether to log this occurrence, and lets through the
// first, then one after 1 s, 2 s, 4 s ... at most every kMaxInterval, so that a failure that
// lasts a day costs a few hundred lines rather than one per check; clear() ends the condition.
class Repeating {
 public:
  static constexpr uint64_t kFirstIntervalNs = 1'000'000'000;
  static constexpr uint64_t kMaxIntervalNs = 600'000'000'000;

  bool report(uint64_t now_ns) noexcept;
  // When report() lets one through: how many it held back since the one before (for "N more").
  uint64_t suppressed() const noexcept { return suppressed_; }
  // Occurrences since the condition began.
  uint64_t count() const noexcept { return count_; }
  // The condition is over. True if it had been reported (the caller may log the recovery).
  bool clear() noexcept;

 private:
  uint64_t count_ = 0;
  uint64_t suppressed_ = 0;  // between the last two occurrences let through
  uint64_t pending_ = 0;     // since the last one let through
  uint64_t next_ns_ = 0;
  uint64_t interval_ns_ = 0;
};

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
