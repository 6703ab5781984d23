// ns per frame of the steering program's offload path, through BPF_PROG_TEST_RUN, side by side
// in one run (rounds interleaved, medians):
//   empty table    the program as built against another build of it (e.g. before offload
//                  existed) given as BEFORE.o, both with the same configuration: no rules,
//                  default pass, a 64-byte UDP frame;
//   installs       (not BPF_PROG_TEST_RUN) microseconds per OffloadTable::install and
//                  remove of 8192 distinct flows, what the control lcore pays per flow;
//   offloaded      a frame forwarded by an offload entry (MACs, NAT of both ends with the IPv4
//                  and UDP checksum updates, devmap redirect) against the same frame
//                  redirected by a steering rule, and against a frame of another flow
//                  classified while the table holds entries.
// BPF_PROG_TEST_RUN repeats a run on the same buffer, so what the program writes stays: the
// entry rewrites each end to itself (the checksum arithmetic runs, the frame stays valid) and
// leaves the TTL alone, which would otherwise reach 1 after 63 runs and leave the fast path.
//
//   build/tests/bench/steer_offload_bench [BEFORE.o] [--rounds N]
// BEFORE.o defaults to none (the empty-table comparison is skipped). Needs root.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <net/if.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../bpf/harness.h"
#include "steer/offload_table.h"
#include "vecflow/parse.h"
#include "vecflow/steer_abi.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr int kRepeat = 1'000'000;
// Flows installed and removed a round for the control side's cost.
constexpr uint32_t kInstalls = 8192;

// An object file loaded alone and configured like SteerHarness with no rules and default pass.
struct RawProgram {
  bpf_object* obj = nullptr;
  int prog_fd = -1;
  ~RawProgram() { bpf_object__close(obj); }
  bool load(const std::string& path) {
    obj = bpf_object__open_file(path.c_str(), nullptr);
    if (!obj || bpf_object__load(obj)) return false;
    prog_fd = bpf_program__fd(bpf_object__find_program_by_name(obj, VF_STEER_PROG_NAME));
    vf_steer_set set{};
    set.default_action.action = VF_ACT_PASS;
    set.rule_capacity = 1;
    uint32_t zero = 0;
    vf_steer_config cfg{1};
    return bpf_map_update_elem(bpf_object__find_map_fd_by_name(obj, "vf_sets"), &zero, &set,
                               BPF_ANY) == 0 &&
           bpf_map_update_elem(bpf_object__find_map_fd_by_name(obj, "vf_config"), &zero, &cfg,
                               BPF_ANY) == 0;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Bytes udp(uint16_t dport) {
  return FrameBuilder().ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 1, 2), 17).udp(1000, dport).build();
}

}  // namespace

int main(int argc, char** argv) {
  std::string before;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      before = argv[i];
    }
  }
  if (!can_use_netns()) {
    fmt::print("steer_offload_bench: needs root and network namespaces\n");
    return 0;
  }
  const std::string ns = unique_name("vob");
  if (sh("ip netns add " + ns + " && ip -n " + ns + " link set lo up && ip -n " + ns +
         " link add o0 type veth peer name o1 && ip -n " + ns + " link set o0 up") != 0)
    return 1;
  int rc = 0;
  {
    NetnsScope in(ns);
    SteerHarness h;
    RawProgram empty_now, empty_before;
    config::SteeringSection s;
    s.default_action = {config::SteerActionKind::Pass, {}};
    config::SteerRule r;
    r.name = "redirect";
    r.match.l4_proto = 17;
    r.match.dst_port = config::PortRange{7000, 7000};
    r.action = {config::SteerActionKind::Redirect, "lo"};
    s.rules.push_back(r);
    if (!in.ok() || !h.ok() || !h.install(s) ||
        !empty_now.load(steer::XdpSteering::bpf_object_path()) ||
        (!before.empty() && !empty_before.load(before))) {
      fmt::print("ERROR OCCURRED: cannot set up the programs: {}\n", h.error());
      rc = 1;
    } else {
      const Bytes offloaded = udp(8000), redirected = udp(7000);
      vf_parsed p{};
      vf_parse_frame(offloaded.data(), offloaded.data() + offloaded.size(),
                     offloaded.data() + offloaded.size(), &p);
      steer::OffloadAction a;
      a.dst_mac = {2, 0, 0, 0, 0, 9};
      a.src_mac = {2, 0, 0, 0, 0, 8};
      a.egress_ifindex = if_nametoindex("o0");
      a.decrement_ttl = false;
      a.snat = steer::NatRewrite{{p.key.src[0]}, p.key.src_port};
      a.dnat = steer::NatRewrite{{p.key.dst[0]}, p.key.dst_port};
      auto& table = h.program().offload();
      std::map<std::string, std::vector<double>> ns_per;
      for (int round = 0; round < rounds; ++round) {
        ns_per["empty table, this build"].push_back(
            ns_per_test_run(empty_now.prog_fd, offloaded, kRepeat));
        if (!before.empty())
          ns_per["empty table, BEFORE.o"].push_back(
              ns_per_test_run(empty_before.prog_fd, offloaded, kRepeat));
        ns_per["redirect rule, table empty"].push_back(
            ns_per_test_run(h.program().prog_fd(), redirected, kRepeat));
        (void)table.install(steer::offload_key(p.key, 1), a);
        ns_per["offloaded (redirect)"].push_back(
            ns_per_test_run(h.program().prog_fd(), offloaded, kRepeat));
        ns_per["redirect rule, table in use"].push_back(
            ns_per_test_run(h.program().prog_fd(), redirected, kRepeat));
        (void)table.clear();
      }
      fmt::print("{:<32} {:>10}   (median of {} rounds, {} runs each)\n", "ns/frame, 64 B UDP",
                 "median", rounds, kRepeat);
      for (const auto& [name, v] : ns_per) {
        std::string all;
        for (double x : v)
          all += fmt::format(" {:.1f}", x);
        fmt::print("{:<32} {:>10.1f}   [{}]\n", name, median(v), all);
      }
      // What the control lcore pays to install a flow and to take it back: kInstalls
      // distinct flows, all to one egress, into the empty table, then removed.
      std::vector<double> install_us, remove_us;
      for (int round = 0; round < rounds; ++round) {
        std::vector<steer::OffloadKey> keys;
        for (uint32_t i = 0; i < kInstalls; ++i) {
          vf_flow_key k = p.key;
          k.src[0] = htonl(0x0a000000u + i);
          keys.push_back(steer::offload_key(k, 1));
        }
        const auto t0 = std::chrono::steady_clock::now();
        for (const auto& k : keys)
          if (!table.install(k, a)) rc = 1;
        const auto t1 = std::chrono::steady_clock::now();
        for (const auto& k : keys)
          if (!table.remove(k)) rc = 1;
        const auto t2 = std::chrono::steady_clock::now();
        install_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() /
                             kInstalls);
        remove_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count() / kInstalls);
      }
      if (rc != 0) fmt::print("ERROR OCCURRED: an install or a remove failed\n");
      fmt::print("{:<32} {:>10.2f}   ({} flows a round)\n", "us per install", median(install_us),
                 kInstalls);
      fmt::print("{:<32} {:>10.2f}\n", "us per remove", median(remove_us));
      auto c = h.program().counters();
      if (!c || c->verdict[VF_VERDICT_OFFLOAD] == 0) {
        fmt::print("ERROR OCCURRED: no frame was offloaded\n");
        rc = 1;
      }
    }
  }
  sh("ip netns del " + ns + " 2>/dev/null");
  return rc;
}
