// ns per frame of the XDP steering program, through BPF_PROG_TEST_RUN, for 1, 100, 10 000
// and 100 000 rules, IPv4 and IPv6, beside two reference programs in the same harness: one
// that only returns XDP_PASS (what the harness costs a frame) and one that does nothing but one
// hash map lookup with the rules' key size (what one tuple's lookup costs). Each measurement runs
// 256 distinct flows (each frame hits a different rule, one in eight matches none), every frame
// repeated inside the kernel, and reports the mean kernel time per frame. Two rule-set series:
//   fixed: every rule has one shape (source prefix + protocol + destination port), so the
//          series isolates the number of rules;
//   mixed: rules drawn from six shapes (prefixes of different lengths, ports, ranges, VLAN),
//          the 1-rule set holding one of them, so the series also shows what shapes cost.
//
//   sudo build/tests/bench/steer_bench            (or: ctest -L bench --verbose)
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "../bpf/harness.h"
#include "vecflow/steer_abi.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// Distinct flows per measurement, and kernel-side repetitions of each.
constexpr int kFlows = 256;
constexpr int kRepeat = 200;
constexpr int kRounds = 5;

enum class Mix { Fixed, Mixed };

struct Workload {
  config::SteeringSection rules;
  std::vector<Bytes> frames;
};

// Rule i and the frame that hits it, for family 4 or 6.
IpPrefix src_prefix(int family, uint32_t i, int v4_len, int v6_len) {
  IpPrefix p;
  p.addr.version = uint8_t(family);
  if (family == 4) {
    uint32_t a = htonl((10u << 24) | (i << 8));  // 10.x.y.0/24: up to 65536 distinct
    if (v4_len == 16) a = htonl((11u << 24) | ((i & 0xffff) << 16));
    std::memcpy(p.addr.bytes.data(), &a, 4);
    p.length = uint8_t(v4_len);
  } else {
    p.addr.bytes = {0x20, 0x01, 0x0d, 0xb8, uint8_t(i >> 16), uint8_t(i >> 8), uint8_t(i)};
    if (v6_len == 48) p.addr.bytes[3] = 0xb9;
    p.length = uint8_t(v6_len);
  }
  return p;
}

Workload make(Mix mix, int family, uint32_t n) {
  Workload w;
  w.rules.default_action = {config::SteerActionKind::Pass, {}};
  std::mt19937 rng(n * 31 + uint32_t(family));
  const config::SteerActionKind actions[] = {
      config::SteerActionKind::Pass, config::SteerActionKind::Drop, config::SteerActionKind::Tx};
  struct Hit {
    IpPrefix src;
    uint8_t proto;
    uint16_t sport, dport;
    std::optional<uint16_t> vlan;
  };
  std::vector<Hit> hits;
  for (uint32_t i = 0; i < n; ++i) {
    config::SteerRule r;
    r.name = fmt::format("r{}", i);
    r.priority = rng() % 4;
    r.action = {actions[rng() % 3], {}};
    auto& m = r.match;
    int shape = mix == Mix::Fixed ? 0 : int(i % 6);
    Hit h{src_prefix(family, i, 24, 64), uint8_t(i % 2 ? 6 : 17), uint16_t(1024 + rng() % 60000),
          uint16_t(1 + i % 1000), std::nullopt};
    switch (shape) {
      case 0:  // source prefix, protocol, destination port
        m.src = h.src;
        m.l4_proto = h.proto;
        m.dst_port = config::PortRange{h.dport, h.dport};
        break;
      case 1:  // a source prefix alone (a block list)
        m.src = h.src = src_prefix(family, i, 16, 48);
        break;
      case 2:  // a destination host, any protocol (the frame's destination is the source here)
        m.src = h.src = src_prefix(family, i, family == 4 ? 32 : 128, 128);
        h.src.addr.bytes[family == 4 ? 3 : 15] = 7;
        m.src->addr.bytes[family == 4 ? 3 : 15] = 7;
        break;
      case 3:  // protocol and a destination port range
        m.l4_proto = 17;
        h.proto = 17;
        m.dst_port = config::PortRange{uint16_t(2000 + (i % 500) * 100),
                                       uint16_t(2000 + (i % 500) * 100 + 49)};
        h.dport = uint16_t(m.dst_port->low + 7);
        m.src = h.src;
        break;
      case 4:  // VLAN and L3
        m.vlan = uint16_t(i % 4000);
        m.l3 = family == 4 ? config::L3Proto::Ipv4 : config::L3Proto::Ipv6;
        h.vlan = m.vlan;
        m.src = h.src;
        break;
      default:  // source port range and destination port
        m.l4_proto = 6;
        h.proto = 6;
        m.src_port = config::PortRange{1024, 65535};
        m.dst_port = config::PortRange{h.dport, h.dport};
        m.src = h.src;
        break;
    }
    w.rules.rules.push_back(std::move(r));
    hits.push_back(h);
  }
  for (int f = 0; f < kFlows; ++f) {
    FrameBuilder b;
    const Hit& h = hits[rng() % hits.size()];
    bool miss = f % 8 == 7;
    if (h.vlan) b.vlan(*h.vlan);
    if (family == 4) {
      std::array<uint8_t, 4> s;
      std::copy_n(h.src.addr.bytes.begin(), 4, s.begin());
      if (h.src.length < 32) s[3] = uint8_t(1 + f);
      if (miss) s[0] = 192;
      b.ipv4(s, ip4(198, 51, 100, uint8_t(f)), h.proto);
    } else {
      std::array<uint8_t, 16> s = h.src.addr.bytes;
      if (h.src.length < 128) s[15] = uint8_t(1 + f);
      if (miss) s[1] = 0x02;
      b.ipv6(s, ip6("2001:db8:ffff::1"), h.proto);
    }
    if (h.proto == 6) {
      b.tcp(h.sport, h.dport);
    } else {
      b.udp(h.sport, h.dport);
    }
    w.frames.push_back(b.build());
  }
  return w;
}

// The benchmark loop: each iteration runs every frame kRepeat times through `prog_fd`, the
// kernel timing it; reports the mean ns a frame. False (the state says why) when a run fails.
bool measure(benchmark::State& state, int prog_fd, const std::vector<Bytes>& frames) {
  const DispatcherHold hold(prog_fd);
  state.counters["held"] = hold.held();
  double total_ns = 0;
  uint64_t runs = 0;
  for (auto _ : state) {
    double iteration_ns = 0;
    for (const auto& f : frames) {
      const double ns = ns_per_test_run(prog_fd, f, kRepeat);
      if (ns < 0) {
        state.SkipWithError("BPF_PROG_TEST_RUN failed");
        return false;
      }
      iteration_ns += ns;
    }
    state.SetIterationTime(iteration_ns * kRepeat / 1e9);
    total_ns += iteration_ns;
    runs += frames.size();
  }
  state.counters["ns_per_frame"] = total_ns / double(runs);
  state.SetItemsProcessed(int64_t(runs) * kRepeat);
  return true;
}

void BM_Steer(benchmark::State& state, Mix mix, int family) {
  if (geteuid() != 0) {
    state.SkipWithError("needs root (BPF_PROG_TEST_RUN)");
    return;
  }
  const auto n = uint32_t(state.range(0));
  auto w = make(mix, family, n);
  steer::SteerProgram::Limits limits;
  limits.rules = std::max<uint32_t>(n, 1024);
  limits.rule_entries = std::max<uint32_t>(2 * n, 4096);
  SteerHarness h(limits);
  if (!h.ok()) {
    state.SkipWithError(h.error().c_str());
    return;
  }
  auto compiled = h.install(w.rules);
  if (!compiled) {
    state.SkipWithError(compiled.error().message.c_str());
    return;
  }
  if (!measure(state, h.program().prog_fd(), w.frames)) return;
  state.counters["tuples"] = compiled->set.tuple_count;
  state.counters["entries"] = double(compiled->entries.size());
}

// Reference programs written as instructions (a few, loaded as they are): what the harness
// costs a frame, and what one lookup in a hash map keyed like the steering's rules costs.
class RawProgram {
 public:
  enum class Kind {
    Pass,    // return XDP_PASS
    Lookup,  // look a zeroed 48-byte key up in a hash map holding it, return XDP_PASS
  };
  explicit RawProgram(Kind kind) {
    constexpr int kKey = 48;  // sizeof(vf_rule_key)
    static_assert(sizeof(vf_rule_key) == kKey);
    std::vector<bpf_insn> insns;
    const auto op = [&](uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
      insns.push_back(bpf_insn{code, dst, src, off, imm});
    };
    if (kind == Kind::Lookup) {
      const uint32_t value = 0;
      const std::array<uint8_t, kKey> key{};
      map_ = bpf_map_create(BPF_MAP_TYPE_HASH, "vf_bench_rules", kKey, sizeof(value), 16, nullptr);
      if (map_ < 0 || bpf_map_update_elem(map_, key.data(), &value, BPF_ANY) != 0) {
        error_ = fmt::format("a hash map for the lookup program: {}", std::strerror(errno));
        return;
      }
      op(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, 0);  // r1 = 0
      for (int16_t off = -kKey; off < 0; off += 8)          // the key on the stack, zeroed
        op(BPF_STX | BPF_MEM | BPF_DW, BPF_REG_10, BPF_REG_1, off, 0);
      op(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map_);  // r1 = the map
      op(0, 0, 0, 0, 0);
      op(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0);  // r2 = &key
      op(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -kKey);
      op(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem);
    }
    op(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_PASS);  // return XDP_PASS
    op(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    fd_ = bpf_prog_load(BPF_PROG_TYPE_XDP, "vf_bench_ref", "GPL", insns.data(), insns.size(),
                        nullptr);
    if (fd_ < 0) error_ = fmt::format("loading a reference XDP program: {}", std::strerror(-fd_));
  }
  ~RawProgram() {
    if (fd_ >= 0) close(fd_);
    if (map_ >= 0) close(map_);
  }
  RawProgram(const RawProgram&) = delete;
  RawProgram& operator=(const RawProgram&) = delete;
  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int map_ = -1;
  std::string error_;
};

// The references: the same frames as one rule of the fixed series through RawProgram, in the
// same harness. The steering program's cost is read against them.
void BM_Reference(benchmark::State& state, RawProgram::Kind kind, int family) {
  if (geteuid() != 0) {
    state.SkipWithError("needs root (BPF_PROG_TEST_RUN)");
    return;
  }
  const auto frames = make(Mix::Fixed, family, 1).frames;
  RawProgram ref(kind);
  if (!ref.ok()) {
    state.SkipWithError(ref.error().c_str());
    return;
  }
  measure(state, ref.fd(), frames);
}

void args(benchmark::internal::Benchmark* b) {
  // A fixed number of rounds over the flows: each round is 256 system calls whose kernel time
  // is measured by the kernel itself, so few rounds give a stable mean.
  b->Arg(1)->Arg(100)->Arg(10000)->Arg(100000)->UseManualTime()->Unit(benchmark::kMillisecond);
  b->Iterations(kRounds);
}

void reference(benchmark::internal::Benchmark* b) {
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(kRounds);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Reference, xdp_pass_ipv4, RawProgram::Kind::Pass, 4)->Apply(reference);
BENCHMARK_CAPTURE(BM_Reference, xdp_pass_ipv6, RawProgram::Kind::Pass, 6)->Apply(reference);
BENCHMARK_CAPTURE(BM_Reference, hash_lookup_ipv4, RawProgram::Kind::Lookup, 4)->Apply(reference);
BENCHMARK_CAPTURE(BM_Steer, fixed_ipv4, Mix::Fixed, 4)->Apply(args);
BENCHMARK_CAPTURE(BM_Steer, fixed_ipv6, Mix::Fixed, 6)->Apply(args);
BENCHMARK_CAPTURE(BM_Steer, mixed_ipv4, Mix::Mixed, 4)->Apply(args);
BENCHMARK_CAPTURE(BM_Steer, mixed_ipv6, Mix::Mixed, 6)->Apply(args);

int main(int argc, char** argv) {
  if (geteuid() == 0) (void)DispatcherHold::enter_own_netns();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
