// Snapshots and rates grouped by one label: what `vecflowctl steering` shows per rule, summed
// over ports, in one pass however many rules there are.
#include <gtest/gtest.h>

#include "api/metrics.h"

namespace vecflow::control {
namespace {

constexpr uint64_t kSecond = 1'000'000'000ull;
const MetricFamily kHits{"test_rule_hits_total", "hits", MetricType::Counter, {"port", "rule"}};

TEST(SnapshotSumBy, SumsEachValueOfTheLabelOverTheOthers) {
  Snapshot s(kSecond);
  s.add(kHits, {"wan", "a"}, 3);
  s.add(kHits, {"lan", "a"}, 4);
  s.add(kHits, {"wan", "b"}, 5);
  auto by_rule = s.sum_by(kHits, "rule");
  EXPECT_EQ(by_rule.size(), 2u);
  EXPECT_EQ(by_rule["a"], 7);
  EXPECT_EQ(by_rule["b"], 5);
  auto by_port = s.sum_by(kHits, "port");
  EXPECT_EQ(by_port["wan"], 8);
  EXPECT_EQ(by_port["lan"], 4);
  EXPECT_TRUE(Snapshot(kSecond).sum_by(kHits, "rule").empty());
}

// What `clear` builds on: a baseline of the families cleared, subtracted from later snapshots.
TEST(SnapshotBaseline, SubtractsClearedCountersOnlyAndSurvivesARestartedSeries) {
  const MetricFamily drops{"test_drops_total", "drops", MetricType::Counter, {"port"}};
  const MetricFamily level{"test_level", "a gauge", MetricType::Gauge, {"port"}};
  Snapshot at_clear(kSecond);
  at_clear.add(kHits, {"wan", "a"}, 10);
  at_clear.add(drops, {"wan"}, 7);
  at_clear.set(level, {"wan"}, 5);
  Snapshot baseline(0);
  baseline.replace(at_clear, [](const MetricFamily& f) { return f.name == "test_drops_total"; });
  EXPECT_EQ(baseline.find("test_rule_hits_total"), nullptr);

  Snapshot later(2 * kSecond);
  later.add(kHits, {"wan", "a"}, 12);
  later.add(drops, {"wan"}, 9);
  later.add(drops, {"lan"}, 1);  // a series born after the clear counts from its start
  later.set(level, {"wan"}, 6);
  later.subtract(baseline);
  EXPECT_EQ(later.count(kHits, {"wan", "a"}), 12u);  // not cleared
  EXPECT_EQ(later.count(drops, {"wan"}), 2u);
  EXPECT_EQ(later.count(drops, {"lan"}), 1u);
  EXPECT_EQ(later.get(level, {"wan"})->as_double(), 6);

  Snapshot restarted(3 * kSecond);
  restarted.add(drops, {"wan"}, 3);  // below the baseline: the part counts from zero again
  restarted.subtract(baseline);
  EXPECT_EQ(restarted.count(drops, {"wan"}), 3u);
}

TEST(RateWindowRateBy, RatesPerValueWithNewSeriesFromZeroAndResetsUnknown) {
  RateWindow rates;
  Snapshot first(kSecond);
  first.add(kHits, {"wan", "a"}, 100);
  first.add(kHits, {"wan", "b"}, 50);
  first.add(kHits, {"wan", "gone"}, 9);
  rates.push(std::move(first));
  EXPECT_TRUE(rates.rate_by(kHits, "rule").empty());  // one sample: no rate yet

  Snapshot second(3 * kSecond);
  second.add(kHits, {"wan", "a"}, 140);
  second.add(kHits, {"lan", "a"}, 20);  // a rule's first hits on another port
  second.add(kHits, {"wan", "b"}, 10);  // went down: the counters were reset
  second.add(kHits, {"lan", "new"}, 8);
  rates.push(std::move(second));
  auto r = rates.rate_by(kHits, "rule");
  ASSERT_TRUE(r["a"].has_value());
  EXPECT_DOUBLE_EQ(*r["a"], 30.0);  // (160 - 100) / 2 s
  ASSERT_TRUE(r["new"].has_value());
  EXPECT_DOUBLE_EQ(*r["new"], 4.0);
  EXPECT_FALSE(r.at("b").has_value());
  EXPECT_FALSE(r.at("gone").has_value());
  EXPECT_EQ(r.size(), 4u);
}

}  // namespace
}  // namespace vecflow::control
