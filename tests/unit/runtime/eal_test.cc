// EAL start-up from the appliance file and the runtime's lcores on EAL threads.
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rte_lcore.h>

#include "app/appliance.h"
#include "config/config.h"
#include "config/stage_type.h"
#include "runtime/runtime.h"

using namespace vecflow;
using testing::Contains;
using testing::Not;

TEST(EalArgs, BuiltFromTheAppliance) {
  auto cfg = config::load_config_text(
      "cpu: {control: 0, workers: [0, 1]}\n"
      "dpdk: {memory_mb: 256, hugepages: auto, eal_args: ['--log-level=lib.eal:debug']}\n"
      "ports: [{name: a, type: dpdk, devargs: net_null0}]\n",
      "t.yaml", config::StageTypes{});
  ASSERT_TRUE(cfg);
  auto opts = runtime_options(*cfg);
  HugePageInfo none;
  auto args = eal_args(opts.eal, none);
  ASSERT_TRUE(args);
  EXPECT_THAT(*args, Contains("--no-huge"));
  EXPECT_THAT(*args, Contains("--no-pci"));
  EXPECT_THAT(*args, Not(Contains("--in-memory")));
  EXPECT_THAT(*args, Contains("0,1"));
  EXPECT_EQ(args->back(), "--log-level=lib.eal:debug");

  HugePageInfo plenty{1ull << 30, 2u << 20, "/dev/hugepages"};
  args = eal_args(opts.eal, plenty);
  ASSERT_TRUE(args);
  EXPECT_THAT(*args, Not(Contains("--no-huge")));
  EXPECT_THAT(*args, Contains("--in-memory"));

  // Multi-process: hugepages stay in files secondary processes can map.
  opts.eal.multiprocess = true;
  args = eal_args(opts.eal, plenty);
  ASSERT_TRUE(args);
  EXPECT_THAT(*args, Not(Contains("--in-memory")));
  EXPECT_THAT(*args, Not(Contains("--no-huge")));
  opts.eal.multiprocess = false;

  opts.eal.hugepages = HugePagePolicy::On;
  auto refused = eal_args(opts.eal, none);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, testing::HasSubstr("nr_hugepages"));
}

TEST(EalArgs, PciScanOnlyWhenAPortNamesAPciDevice) {
  auto cfg = config::load_config_text("ports: [{name: a, type: dpdk, pci: '0000:03:00.0'}]\n",
                                      "t.yaml", config::StageTypes{});
  ASSERT_TRUE(cfg);
  auto args = eal_args(runtime_options(*cfg).eal, HugePageInfo{});
  ASSERT_TRUE(args);
  EXPECT_THAT(*args, Not(Contains("--no-pci")));
}

// Counts polls; stops the runtime after `limit` of them.
class CountingService : public Service {
 public:
  CountingService(std::string name, Runtime* stop_rt, uint64_t limit)
      : Service(std::move(name)), rt_(stop_rt), limit_(limit) {}
  bool poll() noexcept override {
    lcore_seen.store(rte_lcore_id());
    if (++polls >= limit_ && rt_) rt_->request_stop();
    return true;
  }
  std::atomic<uint64_t> polls{0};
  std::atomic<unsigned> lcore_seen{~0u};

 private:
  Runtime* rt_;
  uint64_t limit_;
};

TEST(Runtime, RunsServicesOnEalLcoresAndStopsCleanly) {
  bool two_cores = sysconf(_SC_NPROCESSORS_ONLN) >= 2;
  RuntimeOptions o;
  o.eal.control_lcore = 0;
  o.eal.worker_lcores = two_cores ? std::vector<unsigned>{1} : std::vector<unsigned>{0};
  o.eal.memory_mb = 128;
  o.eal.hugepages = HugePagePolicy::Off;
  o.eal.telemetry = false;
  o.eal.file_prefix = "vf-eal-test-" + std::to_string(getpid());
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt) << rt.error().message;
  EXPECT_FALSE((*rt)->eal().hugepages());
  EXPECT_EQ((*rt)->slots(), two_cores ? 2u : 1u);

  Lcore* worker = (*rt)->lcore(o.eal.worker_lcores[0]);
  ASSERT_NE(worker, nullptr);
  auto work = std::make_shared<CountingService>("worker", nullptr, 0);
  auto ctl = std::make_shared<CountingService>("control", rt->get(), 0);
  worker->add_service(work);
  // The control lcore stops everything once the worker has polled a while.
  class Stopper : public Service {
   public:
    Stopper(Runtime* rt, CountingService* w) : Service("stopper"), rt_(rt), w_(w) {}
    bool poll() noexcept override {
      if (w_->polls.load() > 100000) rt_->request_stop();
      return false;
    }

   private:
    Runtime* rt_;
    CountingService* w_;
  };
  (*rt)->control().add_service(std::make_shared<Stopper>(rt->get(), work.get()));
  ASSERT_TRUE((*rt)->launch());
  (*rt)->run_control();
  (*rt)->join();
  EXPECT_GT(work->polls.load(), 100000u);
  EXPECT_EQ(work->lcore_seen.load(), o.eal.worker_lcores[0]);
  (void)ctl;
}
