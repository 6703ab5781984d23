#include "control/fault.h"
#include "control/command_specs.h"

#include <chrono>
#include <memory>
#include <thread>

namespace vecflow::control {
namespace {

// Runs once on its lcore: sleeps through one round (sleeping rather than spinning leaves the
// core to the rest of the box, as a service blocked in a system call would), then takes
// itself off the lcore. A removal from the lcore's own thread takes effect when the round
// ends, so the object outlives this poll.
class StallService final : public Service {
 public:
  StallService(Lcore& lcore, std::chrono::milliseconds length)
      : Service("fault-stall"), lcore_(lcore), length_(length) {}

  bool poll() noexcept override {
    if (done_) return false;
    done_ = true;
    std::this_thread::sleep_for(length_);
    lcore_.remove_service(this);
    return true;
  }

 private:
  Lcore& lcore_;
  std::chrono::milliseconds length_;
  bool done_ = false;
};

}  // namespace

void register_faults(Registry& registry, Runtime& runtime, const config::ApplianceConfig& running) {
  (void)registry.add_command(Command{
      &kFaultStallSpec, [&runtime, &running](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        const auto id = a.uint("lcore");
        const uint64_t ms = a.uint("ms", 2000);
        if (!running.control.fault_injection)
          return command_error(ErrorCode::Failed,
                               "fault injection is off: set control.fault_injection: true (tests "
                               "and lab drills only)");
        Lcore* lcore = runtime.lcore(static_cast<unsigned>(*id));
        if (!lcore)
          return command_error(ErrorCode::BadArguments, "lcore {} is not one of this appliance's",
                               *id);
        for (const auto& s : lcore->services()) {
          if (s->name() == "fault-stall")
            return command_error(ErrorCode::Failed, "lcore {} already has a stall pending", *id);
        }
        lcore->add_service(std::make_shared<StallService>(*lcore, std::chrono::milliseconds(ms)));
        return Json{{"lcore", *id}, {"stall_ms", ms}};
      }});
}

}  // namespace vecflow::control
