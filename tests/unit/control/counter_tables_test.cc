// The counter tables' helpers (api/counter_table.h): covers_struct refuses a table that leaves
// a member of its struct out or lists one twice, add_counters makes one series per row, and
// add_counters_json reads them back under the rows' keys.
#include <gtest/gtest.h>

#include "api/counter_table.h"

namespace vecflow::control {
namespace {

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
