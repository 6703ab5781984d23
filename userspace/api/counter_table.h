// Every counter of a stats struct declared once: one table per struct, a row per member with
// the metric family it is collected into and its key in a command's JSON row, as DPDK's xstats
// name tables and VPP's foreach_*_error lists do. The collector adds a struct with
// add_counters(), a view reads the rows back with add_counters_json(), and a static_assert
// beside each table (covers_struct) stops the build when the struct gains a member without a
// row: a counter cannot exist without its metric. tests/unit/control/counter_tables_test.cc
// checks what the compiler cannot: the names, help texts and keys of every table.
//
//   inline const MetricFamily kWorkerEvents{"vecflow_sched_worker_events_total", "...",
//                                           MetricType::Counter, {"worker"}};
//   constexpr auto kWorkerCounters = std::to_array<CounterField<sched::WorkerStats>>({
//       {"events", &kWorkerEvents, &sched::WorkerStats::events}, ...});
//   static_assert(covers_struct(kWorkerCounters));
//
//   add_counters(s, kWorkerCounters, worker.worker_stats(), {name});    // the collector
//   add_counters_json(row, s, kWorkerCounters, {name});                  // the view's row
//
// A row points at its family rather than holding it: several members may share one family,
// each under its own value of the family's last label (a route's outcomes), views read the
// family for rates, and a pointer to a constant keeps the table constexpr, so that the checks
// run at compile time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "api/command.h"
#include "api/metrics.h"
#include "core/counter.h"

namespace vecflow::control {

// One member of `Stats`: a Counter (written on the data path) or a uint64_t (a sum over
// lcores, or a copy read from the kernel).
template <class Stats, class Value = Counter>
struct CounterField {
  using stats_type = Stats;
  using value_type = Value;

  std::string_view key;  // in the JSON row of the command that shows it
  const MetricFamily* family;
  Value Stats::*member;
  // When set, the value of the family's last label for this member (the family is shared by
  // several members); the caller gives the others.
  std::string_view label = {};
};

inline uint64_t counter_value(const Counter& c) noexcept {
  return c.load();
}
inline uint64_t counter_value(uint64_t v) noexcept {
  return v;
}

// True when each member appears in one row and the rows are the whole struct: its size is
// what its rows' members take plus `other` (the bytes of members collected another way, e.g.
// a histogram, said beside the table), rounded up to its alignment. A struct aligned wider
// than its members (alignas(64)) hides a few added members in its padding: give its counters
// an unpadded base struct and the table that one.
template <class Field, size_t N>
constexpr bool covers_struct(const std::array<Field, N>& table, size_t other = 0) {
  for (size_t i = 0; i < N; ++i) {
    for (size_t j = i + 1; j < N; ++j) {
      if (table[i].member == table[j].member) return false;
    }
  }
  using Stats = typename Field::stats_type;
  const size_t bytes = N * sizeof(typename Field::value_type) + other;
  const size_t align = alignof(Stats);
  return sizeof(Stats) == (bytes + align - 1) / align * align;
}

namespace counter_table_detail {
// `labels` and the row's own label, if it has one.
template <class Field>
std::vector<std::string_view> row_labels(const Field& f, Labels labels) {
  std::vector<std::string_view> all(labels);
  if (!f.label.empty()) all.push_back(f.label);
  return all;
}
}  // namespace counter_table_detail

// Adds every row's member of `stats` to `s`, under `labels` (the family's labels but a row's
// own) and the row's label.
template <class Field, size_t N>
void add_counters(Snapshot& s, const std::array<Field, N>& table,
                  const typename Field::stats_type& stats, Labels labels) {
  for (const Field& f : table)
    s.add(*f.family, counter_table_detail::row_labels(f, labels), counter_value(stats.*f.member));
}

// Sets `row[key]` to each row's count in `s`, in the table's order.
template <class Field, size_t N>
void add_counters_json(Json& row, const Snapshot& s, const std::array<Field, N>& table,
                       Labels labels) {
  for (const Field& f : table)
    row[f.key] = s.count(*f.family, counter_table_detail::row_labels(f, labels));
}

// A table without its struct's type, for the test that reads every table's names.
struct CounterTableInfo {
  struct Row {
    std::string_view key;
    const MetricFamily* family;
    std::string_view label;
  };
  std::string_view stats;  // the struct's name
  std::vector<Row> rows;
};

template <class Field, size_t N>
CounterTableInfo describe(std::string_view stats, const std::array<Field, N>& table) {
  CounterTableInfo info{stats, {}};
  for (const Field& f : table)
    info.rows.push_back({f.key, f.family, f.label});
  return info;
}

}  // namespace vecflow::control
