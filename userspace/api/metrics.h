// Counters as the control plane sees them: named families of labelled series, collected into a
// Snapshot in one pass over every registered collector.
//
// One snapshot serves everything that reads statistics: a /metrics scrape renders one snapshot
// (so its numbers are consistent with each other), a control command reads the snapshot taken
// for its request, and the control plane's sampler keeps the last two periodic snapshots to
// derive per-second rates (RateWindow). Collectors read the data path's single-writer Counters
// (relaxed loads, no locks) on the control thread.
//
// Names follow Prometheus conventions: vecflow_<part>_<what>_<unit>, counters end in _total,
// labels are lower-case (port, queue, lcore, reason).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace vecflow::control {

// Histogram: a Prometheus histogram. The family's last label is "le"; its series are the
// cumulative bucket counts (le: the bucket's bound, "+Inf" for the last) and the sum of what
// was observed (le empty: a real number, in the family's unit). Rendered as name_bucket,
// name_sum and name_count (the "+Inf" bucket). Like counters, its series only grow.
enum class MetricType { Counter, Gauge, Histogram };

constexpr bool is_cumulative(MetricType t) noexcept {
  return t != MetricType::Gauge;
}
std::string_view to_string(MetricType t) noexcept;

// A family is declared once, as a constant with static storage duration (snapshots keep
// pointers to it):
//
//   inline const MetricFamily kPortRxPackets{"vecflow_port_rx_packets_total",
//       "Packets received by a port queue", MetricType::Counter, {"port", "queue"}};
struct MetricFamily {
  std::string_view name;
  std::string_view help;
  MetricType type = MetricType::Counter;
  std::vector<std::string_view> labels;
};

// A sample value: counters are exact integers; gauges may be fractional.
struct MetricValue {
  bool integral = true;
  uint64_t count = 0;
  double real = 0;
  double as_double() const noexcept { return integral ? static_cast<double>(count) : real; }
};

using Labels = std::initializer_list<std::string_view>;
using LabelMatch = std::initializer_list<std::pair<std::string_view, std::string_view>>;

class Snapshot {
 public:
  struct Series {
    std::vector<std::string> labels;  // values, in the family's label order
    MetricValue value;
  };
  struct Family {
    const MetricFamily* family;
    std::map<std::vector<std::string>, MetricValue> series;
  };

  // Takes the current CLOCK_MONOTONIC time as the snapshot's time.
  Snapshot();
  // A snapshot of a given time (ns, CLOCK_MONOTONIC): tests and replays.
  explicit Snapshot(uint64_t taken_ns) : taken_ns_(taken_ns) {}

  // Adds to a series (summing when the same series is added twice, so per-lcore cells can be
  // added one by one). `labels` must match the family's label list in number.
  void add(const MetricFamily& f, Labels labels, uint64_t value);
  // The same with labels built at run time (api/counter_table.h appends a row's own label).
  void add(const MetricFamily& f, std::span<const std::string_view> labels, uint64_t value);
  // Sets a gauge series.
  void set(const MetricFamily& f, Labels labels, double value);
  // Adds one histogram to a Histogram family (`labels`: its labels but le): bucket i counts
  // what was at most bounds[i] (ascending; the last bucket, +Inf, is `cumulative`'s last
  // entry, so it has one entry more than `bounds`), `sum` what was observed in all.
  void add_histogram(const MetricFamily& f, Labels labels, std::span<const double> bounds,
                     std::span<const uint64_t> cumulative, double sum);
  // Declares a family with no series yet, so it still appears (with HELP/TYPE) in a scrape.
  void declare(const MetricFamily& f);

  std::optional<MetricValue> get(const MetricFamily& f, Labels labels) const;
  uint64_t count(const MetricFamily& f, Labels labels) const;  // 0 when absent
  uint64_t count(const MetricFamily& f, std::span<const std::string_view> labels) const;
  // Sum of every series whose labels equal the given values ({} sums the family).
  double sum(const MetricFamily& f, LabelMatch match = {}) const;
  // Sums of a family's series per value of one of its labels (e.g. per rule over ports), in
  // one pass: for callers that want every value, where sum() per value would be quadratic.
  std::unordered_map<std::string, double> sum_by(const MetricFamily& f,
                                                 std::string_view label) const;
  // Series of a family, in label order; nullptr when nothing was collected for it.
  const Family* find(std::string_view family_name) const;
  const std::vector<Family>& families() const noexcept { return families_; }
  uint64_t taken_ns() const noexcept { return taken_ns_; }

  // What counted since `base` was taken: each counter series minus its value in `base` (gauges
  // are left alone). A series below its base (its part was rebuilt and counts from zero again)
  // stays as it is.
  void subtract(const Snapshot& base);
  // Takes over the families of `from` that `which` selects, replacing what this one had of them.
  void replace(const Snapshot& from, const std::function<bool(const MetricFamily&)>& which);

 private:
  Family& family(const MetricFamily& f);
  std::vector<Family> families_;  // in first-collected order
  uint64_t taken_ns_;
};

// Per-second rates between the two most recent periodic snapshots.
class RateWindow {
 public:
  void push(Snapshot latest);
  bool ready() const noexcept { return previous_.has_value() && latest_.has_value(); }
  double interval_s() const noexcept;
  // Rate of one counter series; nullopt until two samples exist or after a counter reset.
  std::optional<double> rate(const MetricFamily& f, Labels labels) const;
  // Rate of a sum of series (see Snapshot::sum).
  std::optional<double> rate_sum(const MetricFamily& f, LabelMatch match = {}) const;
  // Rates of the sums per value of one label (see Snapshot::sum_by): values seen in either
  // sample; nullopt for one whose sum went down (a reset). Empty until two samples exist.
  std::unordered_map<std::string, std::optional<double>> rate_by(const MetricFamily& f,
                                                                 std::string_view label) const;

 private:
  std::optional<Snapshot> previous_;
  std::optional<Snapshot> latest_;
};

using Collector = std::function<void(Snapshot&)>;

// The Prometheus text exposition format (version 0.0.4) of a snapshot.
std::string render_prometheus(const Snapshot& s);

// CLOCK_MONOTONIC in nanoseconds.
uint64_t monotonic_ns() noexcept;

}  // namespace vecflow::control
