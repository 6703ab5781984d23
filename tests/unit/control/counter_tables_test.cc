// Every counter table (api/counter_table.h) read together: what a dashboard, the man pages and
// vecflowctl rely on in the names of the series the tables make.
//
// Guards the rule "a counter without a metric fails a test" with the static_assert beside
// each table: a member added to a stats struct without a row in its table stops the build of
// its part, and so this test. What the compiler cannot see is checked here: that a row's
// family is a well-formed metric (vecflow_<part>_..., counters in _total, help text), that no
// two rows of any table make the same series, that a row's JSON key is unique in its table,
// and that rows sharing a family tell their members apart by label.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/counter_table.h"
#include "control/builtin_commands.h"
#include "control/parts/pipeline_part.h"
#include "control/parts/ports_part.h"
#include "control/parts/sched_part.h"
#include "control/parts/steering_part.h"
#include "pipeline/conntrack/conntrack_commands.h"
#include "pipeline/neighbour/neighbour_commands.h"
#include "pipeline/route/route_commands.h"

namespace vecflow::control {
namespace {

std::vector<CounterTableInfo> every_table() {
  std::vector<CounterTableInfo> all;
  for (auto part : {runtime_counter_tables(), sched_counter_tables(), ports_counter_tables(),
                    pipeline_counter_tables(), steering_counter_tables(), route_counter_tables(),
                    neighbour_counter_tables(), conntrack_counter_tables()}) {
    for (auto& t : part)
      all.push_back(std::move(t));
  }
  return all;
}

TEST(CounterTables, FamiliesAreWellFormedMetrics) {
  const std::regex counter_name("vecflow_[a-z]+_[a-z0-9_]+_total");
  for (const CounterTableInfo& t : every_table()) {
    ASSERT_FALSE(t.rows.empty()) << t.stats;
    for (const auto& row : t.rows) {
      ASSERT_NE(row.family, nullptr) << t.stats << " " << row.key;
      const MetricFamily& f = *row.family;
      EXPECT_EQ(f.type, MetricType::Counter) << f.name;
      EXPECT_TRUE(std::regex_match(std::string(f.name), counter_name))
          << t.stats << " " << row.key << ": " << f.name << " is not vecflow_<part>_<what>_total";
      EXPECT_FALSE(f.help.empty()) << f.name;
      // The row's own label is the family's last; the caller gives the others.
      if (!row.label.empty()) {
        EXPECT_FALSE(f.labels.empty()) << f.name;
      }
    }
  }
}

TEST(CounterTables, NoTwoRowsMakeTheSameSeries) {
  std::map<std::pair<std::string_view, std::string_view>, std::string> seen;
  for (const CounterTableInfo& t : every_table()) {
    for (const auto& row : t.rows) {
      auto [it, fresh] = seen.emplace(std::pair{row.family->name, row.label},
                                      std::string(t.stats) + "." + std::string(row.key));
      EXPECT_TRUE(fresh) << row.family->name << "{" << row.label << "} is made by both "
                         << it->second << " and " << t.stats << "." << row.key;
    }
  }
}

TEST(CounterTables, RowsSharingAFamilyHaveLabels) {
  std::map<std::string_view, int> rows_of;
  for (const CounterTableInfo& t : every_table()) {
    for (const auto& row : t.rows)
      ++rows_of[row.family->name];
  }
  for (const CounterTableInfo& t : every_table()) {
    for (const auto& row : t.rows) {
      if (rows_of[row.family->name] > 1) {
        EXPECT_FALSE(row.label.empty())
            << t.stats << "." << row.key << " shares " << row.family->name << " without a label";
      }
    }
  }
}

TEST(CounterTables, KeysAreUniqueInATable) {
  for (const CounterTableInfo& t : every_table()) {
    std::set<std::string_view> keys;
    for (const auto& row : t.rows) {
      EXPECT_FALSE(row.key.empty()) << t.stats;
      EXPECT_TRUE(keys.insert(row.key).second) << t.stats << " has key " << row.key << " twice";
    }
  }
}

// The helpers: add_counters makes one series per row, summing cells added twice;
// add_counters_json reads them back under the rows' keys.
struct TwoCounts {
  Counter a;
  Counter b;
};
inline const MetricFamily kTestA{"vecflow_test_a_total", "a", MetricType::Counter, {"thing"}};
inline const MetricFamily kTestB{
    "vecflow_test_b_total", "b", MetricType::Counter, {"thing", "kind"}};
constexpr auto kTwoCounts = std::to_array<CounterField<TwoCounts>>({
    {"a", &kTestA, &TwoCounts::a},
    {"b_kind", &kTestB, &TwoCounts::b, "kind"},
});
static_assert(covers_struct(kTwoCounts));
// A member missing from the table, or listed twice, is what covers_struct refuses.
constexpr auto kOneOfTwo = std::to_array<CounterField<TwoCounts>>({{"a", &kTestA, &TwoCounts::a}});
static_assert(!covers_struct(kOneOfTwo));
constexpr auto kTwiceA = std::to_array<CounterField<TwoCounts>>({
    {"a", &kTestA, &TwoCounts::a},
    {"a2", &kTestA, &TwoCounts::a, "x"},
});
static_assert(!covers_struct(kTwiceA));

TEST(CounterTables, AddAndReadBack) {
  TwoCounts c;
  c.a.add(3);
  c.b.add(5);
  Snapshot s(0);
  add_counters(s, kTwoCounts, c, {"x"});
  add_counters(s, kTwoCounts, c, {"x"});
  EXPECT_EQ(s.count(kTestA, {"x"}), 6u);
  EXPECT_EQ(s.count(kTestB, {"x", "kind"}), 10u);
  Json row{{"thing", "x"}};
  add_counters_json(row, s, kTwoCounts, {"x"});
  EXPECT_EQ(row, (Json{{"thing", "x"}, {"a", 6}, {"b_kind", 10}}));
}

}  // namespace
}  // namespace vecflow::control
