// Drops in the log, without the data path ever logging.
//
// The data path only counts drops (per lcore, per port, per reason). The control plane reads
// those counters with every periodic sample (vecflow_drops_total) and logs what increased, one
// event per port and reason with both as structured fields (journalctl VECFLOW_REASON=no_route).
// Each reason has its own rate limit, so a flood of one reason cannot hide another; what a
// limit holds back is not lost: the next line of that reason reports everything since the
// previous one.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "api/metrics.h"
#include "core/drop_reason.h"
#include "core/log.h"

namespace vecflow::control {

class DropLogger {
 public:
  // Lines per reason per kPeriodNs: one every ten seconds tells an operator a drop is
  // ongoing and how fast, without one reason filling the journal.
  static constexpr uint32_t kBurst = 1;
  static constexpr uint64_t kPeriodNs = 10'000'000'000ull;

  DropLogger();
  // Called with every periodic sample (ControlServer::add_sample_listener).
  void observe(const Snapshot& s);

 private:
  struct Pending {
    uint64_t count = 0;
    uint64_t since_ns = 0;
  };
  using Key = std::tuple<std::string, std::string, std::string>;  // port, reason, layer
  std::map<Key, uint64_t> last_;  // counter values at the previous sample
  std::map<Key, Pending> pending_;
  std::array<log::RateLimiter, kDropReasonCount> limits_;
  bool primed_ = false;
  uint64_t last_sample_ns_ = 0;
};

}  // namespace vecflow::control
