// Drops reach the log from the control plane's samples: one line per port and reason with
// both as fields, each reason rate-limited on its own, and no drop lost to the limit.
#include <gtest/gtest.h>

#include <spdlog/sinks/ringbuffer_sink.h>

#include "api/families.h"
#include "control/drop_log.h"

namespace vecflow::control {
namespace {

constexpr uint64_t kSecond = 1'000'000'000ull;

class DropLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100);
    sink_->set_pattern("%v");
    log::get("drops")->sinks().push_back(sink_);
  }
  void TearDown() override {
    auto& sinks = log::get("drops")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  Snapshot sample(uint64_t t, uint64_t no_route_wan, uint64_t no_route_lan, uint64_t acl) {
    Snapshot s(t);
    s.add(kDrops, {"wan", "no_route", "userspace"}, no_route_wan);
    s.add(kDrops, {"lan", "no_route", "userspace"}, no_route_lan);
    s.add(kDrops, {"wan", "acl_deny", "userspace"}, acl);
    return s;
  }
  std::vector<std::string> lines() { return sink_->last_formatted(); }

  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  DropLogger logger_;
};

TEST_F(DropLogTest, FirstSampleIsTheBaseline) {
  logger_.observe(sample(1 * kSecond, 500, 0, 0));
  EXPECT_TRUE(lines().empty());
}

TEST_F(DropLogTest, NewDropsAreLoggedWithPortAndReasonFields) {
  logger_.observe(sample(1 * kSecond, 0, 0, 0));
  logger_.observe(sample(2 * kSecond, 7, 0, 3));
  auto l = lines();
  ASSERT_EQ(l.size(), 2u);
  // Ordered by port, then reason.
  EXPECT_NE(l[0].find("port wan: 3 packet(s) dropped"), std::string::npos) << l[0];
  EXPECT_NE(l[0].find("port=wan reason=acl_deny layer=userspace count=3"), std::string::npos);
  EXPECT_NE(l[1].find("port=wan reason=no_route layer=userspace count=7"), std::string::npos);
}

TEST_F(DropLogTest, EachReasonIsLimitedAloneAndNothingIsLost) {
  logger_.observe(sample(1 * kSecond, 0, 0, 0));
  logger_.observe(sample(2 * kSecond, 10, 0, 0));  // no_route logged
  logger_.observe(sample(3 * kSecond, 25, 4, 1));  // no_route held back; acl_deny logged
  auto l = lines();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_NE(l[1].find("reason=acl_deny"), std::string::npos);
  // Past the period, every no_route drop since the last line is reported, per port.
  logger_.observe(sample(2 * kSecond + DropLogger::kPeriodNs, 40, 9, 1));
  l = lines();
  ASSERT_EQ(l.size(), 4u);
  EXPECT_NE(l[2].find("port=lan reason=no_route layer=userspace count=9"), std::string::npos)
      << l[2];
  EXPECT_NE(l[3].find("port=wan reason=no_route layer=userspace count=30"), std::string::npos)
      << l[3];
}

}  // namespace
}  // namespace vecflow::control
