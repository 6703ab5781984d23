// Runs the steering program through BPF_PROG_TEST_RUN: loads an instance, installs a
// steering section compiled for one ingress port, and runs frames. Shared by the BPF tests
// and the benchmark.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sched.h>
#include <sys/mman.h>
#include <xdp/xsk.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "steer/program.h"
#include "steer/rules.h"
#include "steer/steering.h"
#include "support/frame_builder.h"
#include "support/lab.h"
#include "support/raw_xsk.h"
#include "vecflow/xdp_meta.h"

namespace vecflow::test {

inline constexpr const char* kIngressPort = "wan";
// Redirect targets in tests resolve to this ifindex (loopback exists everywhere).
inline constexpr uint32_t kRedirectIfindex = 1;

struct RunResult {
  int xdp_action = -1;
  int error = 0;  // -errno when BPF_PROG_TEST_RUN refused the frame (xdp_action is then -1)
  uint32_t meta_size = 0;
  vf_xdp_meta meta{};
};

// Filled field by field rather than with LIBBPF_OPTS, whose designated initialiser leaves
// fields out (clang 19's -Wmissing-designated-field-initializers).
inline bpf_test_run_opts test_run_opts(const Bytes& frame, int repeat) {
  bpf_test_run_opts opts{};
  opts.sz = sizeof(opts);
  opts.data_in = frame.data();
  opts.data_size_in = uint32_t(frame.size());
  opts.repeat = repeat;
  return opts;
}

// Average ns per run of `frame` through program `prog_fd` over `repeat` runs inside the
// kernel (BPF_PROG_TEST_RUN's own timing), or -1.
inline double ns_per_test_run(int prog_fd, const Bytes& frame, int repeat) {
  bpf_test_run_opts opts = test_run_opts(frame, repeat);
  if (bpf_prog_test_run_opts(prog_fd, &opts) != 0) return -1;
  return double(opts.duration);
}

// BPF_PROG_TEST_RUN with a repeat count adds the program to the kernel's XDP dispatcher for the
// call and takes it out after, each a change of the dispatcher's image behind an RCU grace
// period: ~16 ms a call on these VMs, whatever the repeat, where the runs themselves take a
// fraction of a millisecond. A program attached to a device stays in the dispatcher, so a
// benchmark that runs a program many times holds it attached while it measures: in generic
// (skb) mode to the loopback device of a network namespace of the process's own, which sees
// no traffic and goes with the process.
class DispatcherHold {
 public:
  // Moves the process into a network namespace of its own, once (a benchmark's main, before
  // any thread starts). False when refused (not root): holds are then not taken.
  static bool enter_own_netns() {
    own_netns() = unshare(CLONE_NEWNET) == 0;
    return own_netns();
  }
  explicit DispatcherHold(int prog_fd) {
    if (!own_netns()) return;
    ifindex_ = if_nametoindex("lo");
    held_ =
        ifindex_ != 0 && bpf_xdp_attach(int(ifindex_), prog_fd, XDP_FLAGS_SKB_MODE, nullptr) == 0;
  }
  ~DispatcherHold() {
    if (held_) bpf_xdp_detach(int(ifindex_), XDP_FLAGS_SKB_MODE, nullptr);
  }
  DispatcherHold(const DispatcherHold&) = delete;
  DispatcherHold& operator=(const DispatcherHold&) = delete;
  bool held() const noexcept { return held_; }

 private:
  static bool& own_netns() {
    static bool own = false;
    return own;
  }
  unsigned ifindex_ = 0;
  bool held_ = false;
};

class SteerHarness {
 public:
  // Loads a fresh instance; `limits` sized for the largest set this harness will install.
  explicit SteerHarness(steer::SteerProgram::Limits limits = {}) {
    steer::route_bpf_logs();
    auto p = steer::SteerProgram::load(limits);
    if (!p) {
      error_ = p.error().message;
      return;
    }
    program_ = std::move(*p);
  }
  bool ok() const { return program_ != nullptr; }
  const std::string& error() const { return error_; }
  steer::SteerProgram& program() { return *program_; }

  // Frames run on rx queue 0; `queues` says whether the port reads it.
  Result<steer::CompiledRules> install(const config::SteeringSection& s,
                                       const steer::RxQueuePlan& queues = {}) {
    auto c = steer::compile_rules(
        s, kIngressPort, [](std::string_view) -> Result<uint32_t> { return kRedirectIfindex; },
        queues);
    if (!c) return c;
    if (auto r = program_->install(*c); !r) return std::unexpected(r.error());
    return c;
  }

  RunResult run(const Bytes& frame) {
    RunResult r;
    std::vector<uint8_t> out(frame.size() + 256);
    bpf_test_run_opts opts = test_run_opts(frame, 1);
    opts.data_out = out.data();
    opts.data_size_out = uint32_t(out.size());
    if (int err = bpf_prog_test_run_opts(program_->prog_fd(), &opts); err != 0) {
      r.error = err;
      return r;
    }
    r.xdp_action = int(opts.retval);
    if (opts.data_size_out >= frame.size() + sizeof(vf_xdp_meta)) {
      r.meta_size = uint32_t(opts.data_size_out - frame.size());
      std::memcpy(&r.meta, out.data() + r.meta_size - sizeof(vf_xdp_meta), sizeof(r.meta));
    }
    return r;
  }

 private:
  std::unique_ptr<steer::SteerProgram> program_;
  std::string error_;
};

// An AF_XDP socket bound to queue 0 of the loopback of a private namespace, so the program's
// `userspace` path finds a socket in xsks_map and writes its metadata under BPF_PROG_TEST_RUN.
class LoopbackXsk {
 public:
  explicit LoopbackXsk(const std::string& ns) : ns_(ns) {
    if (sh("ip netns add " + ns_ + " && ip netns exec " + ns_ + " ip link set lo up") != 0) return;
    NetnsScope in(ns_);
    if (!in.ok()) return;
    xsk_ = std::make_unique<RawXsk>("lo", 64);
  }
  ~LoopbackXsk() {
    xsk_.reset();
    sh("ip netns del " + ns_ + " 2>/dev/null");
  }
  bool ok() const { return xsk_ && xsk_->ok(); }
  int fd() const { return xsk_->fd(); }

 private:
  std::string ns_;
  std::unique_ptr<RawXsk> xsk_;
};

}  // namespace vecflow::test
