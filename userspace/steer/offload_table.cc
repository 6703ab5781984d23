#include "steer/offload_table.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "steer/program.h"

namespace vecflow::steer {

namespace {

vf_offload_action to_abi(const OffloadAction& a) {
  vf_offload_action v{};
  std::memcpy(v.dst_mac, a.dst_mac.data(), 6);
  std::memcpy(v.src_mac, a.src_mac.data(), 6);
  v.egress_ifindex = a.egress_ifindex;
  if (a.decrement_ttl) v.flags |= VF_OFFLOAD_DEC_TTL;
  if (a.snat) {
    v.flags |= VF_OFFLOAD_SNAT;
    std::copy(a.snat->addr.begin(), a.snat->addr.end(), v.nat_src);
    v.nat_src_port = a.snat->port;
  }
  if (a.dnat) {
    v.flags |= VF_OFFLOAD_DNAT;
    std::copy(a.dnat->addr.begin(), a.dnat->addr.end(), v.nat_dst);
    v.nat_dst_port = a.dnat->port;
  }
  v.gate = a.gate;
  v.rule_id = a.rule_id;
  return v;
}

OffloadAction from_abi(const vf_offload_action& v) {
  OffloadAction a;
  std::memcpy(a.dst_mac.data(), v.dst_mac, 6);
  std::memcpy(a.src_mac.data(), v.src_mac, 6);
  a.egress_ifindex = v.egress_ifindex;
  a.decrement_ttl = (v.flags & VF_OFFLOAD_DEC_TTL) != 0;
  if (v.flags & VF_OFFLOAD_SNAT)
    a.snat = NatRewrite{{v.nat_src[0], v.nat_src[1], v.nat_src[2], v.nat_src[3]}, v.nat_src_port};
  if (v.flags & VF_OFFLOAD_DNAT)
    a.dnat = NatRewrite{{v.nat_dst[0], v.nat_dst[1], v.nat_dst[2], v.nat_dst[3]}, v.nat_dst_port};
  a.gate = static_cast<uint16_t>(v.gate);
  a.rule_id = v.rule_id;
  return a;
}

Result<void> check(const OffloadKey& key, const OffloadAction& a) {
  const auto& f = key.flow;
  if (f.ip_version != 4 && f.ip_version != 6)
    return fail("offload: IP version {} (4 or 6)", unsigned(f.ip_version));
  if (f.pad != 0) return fail("offload: the flow key's padding must be zero");
  if (key.ifindex == 0 || a.egress_ifindex == 0)
    return fail("offload: ingress and egress need an interface");
  const bool ports = f.l4_proto == 6 || f.l4_proto == 17;
  if ((a.snat || a.dnat) && !ports)
    return fail("offload: NAT needs a TCP or UDP flow, not protocol {}", unsigned(f.l4_proto));
  if (f.ip_version == 4) {
    for (const auto* n : {&a.snat, &a.dnat})
      if (*n && ((*n)->addr[1] | (*n)->addr[2] | (*n)->addr[3]))
        return fail("offload: an IPv4 NAT address uses word 0 only");
  }
  return {};
}

}  // namespace

OffloadKey offload_key(const vf_flow_key& flow, uint32_t ifindex) noexcept {
  OffloadKey k{};
  k.flow = flow;
  k.flow.pad = 0;
  k.ifindex = ifindex;
  return k;
}

constexpr size_t kGatesBytes = sizeof(vf_offload_gate) * VF_OFFLOAD_GATES;

OffloadTable::OffloadTable(SteerProgram& program, int map_fd, int ctl_fd, int gates_fd,
                           uint32_t capacity)
    : program_(program),
      map_fd_(map_fd),
      ctl_fd_(ctl_fd),
      capacity_(capacity),
      per_cpu_(size_t(std::max(libbpf_num_possible_cpus(), 1))) {
  // Without the gates no entry is installed (take_gate() has none): flows stay in user space.
  void* p = mmap(nullptr, kGatesBytes, PROT_READ | PROT_WRITE, MAP_SHARED, gates_fd, 0);
  if (p == MAP_FAILED) return;
  gates_ = static_cast<vf_offload_gate*>(p);
  free_gates_.reserve(VF_OFFLOAD_GATES - 1);
  for (uint16_t g = VF_OFFLOAD_GATES - 1; g > 0; --g)
    free_gates_.push_back(g);
}

OffloadTable::~OffloadTable() {
  if (gates_) munmap(gates_, kGatesBytes);
}

std::optional<uint16_t> OffloadTable::take_gate(uint64_t now_ns) noexcept {
  while (!quarantined_.empty() && quarantined_.front().until_ns <= now_ns) {
    free_gates_.push_back(quarantined_.front().gate);
    quarantined_.pop_front();
  }
  if (free_gates_.empty()) return std::nullopt;
  const uint16_t g = free_gates_.back();
  free_gates_.pop_back();
  std::atomic_ref<__u64>(gates_[g].lifted).store(0, std::memory_order_release);
  return g;
}

bool OffloadTable::gate_open(uint16_t g) const noexcept {
  return (std::atomic_ref<__u64>(gates_[g].lifted).load(std::memory_order_acquire) &
          VF_GATE_OPEN) != 0;
}

uint64_t OffloadTable::gate_lifted(uint16_t g) const noexcept {
  return std::atomic_ref<__u64>(gates_[g].lifted).load(std::memory_order_acquire) & ~VF_GATE_OPEN;
}

bool OffloadTable::open_gate(uint16_t g, uint64_t lifted) noexcept {
  __u64 expected = lifted;
  return std::atomic_ref<__u64>(gates_[g].lifted)
             .compare_exchange_strong(expected, lifted | VF_GATE_OPEN, std::memory_order_acq_rel) ||
         (expected & VF_GATE_OPEN);
}

void OffloadTable::release_gate(uint16_t g, bool open, uint64_t now_ns) noexcept {
  if (g == 0 || g >= VF_OFFLOAD_GATES) return;
  if (open) {
    free_gates_.push_back(g);
  } else {
    quarantined_.push_back(Quarantined{g, now_ns + kGateQuarantineNs});
  }
}

uint64_t OffloadTable::now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

Result<void> OffloadTable::set_active(bool on) {
  if (active_ == on) return {};
  const uint32_t zero = 0;
  vf_offload_ctl ctl{};
  ctl.active = on ? 1 : 0;
  if (bpf_map_update_elem(ctl_fd_, &zero, &ctl, BPF_ANY))
    return fail("offload: cannot switch the table {}: {}", on ? "on" : "off", errno_text(-errno));
  active_ = on;
  return {};
}

Result<bool> OffloadTable::lookup(const OffloadKey& key) const {
  if (bpf_map_lookup_elem(map_fd_, &key, per_cpu_.data()) == 0) return true;
  if (errno == ENOENT) return false;
  return fail("offload: cannot read an entry: {}", errno_text(-errno));
}

OffloadStats OffloadTable::sum() const noexcept {
  OffloadStats s;
  for (const auto& v : per_cpu_) {
    s.packets += v.packets;
    s.bytes += v.bytes;
    s.last_seen_ns = std::max<uint64_t>(s.last_seen_ns, v.last_seen_ns);
  }
  return s;
}

Result<InstallStatus> OffloadTable::install(const OffloadKey& key, const OffloadAction& action) {
  if (auto ok = check(key, action); !ok) return std::unexpected(ok.error());
  const bool tx = action.egress_ifindex == key.ifindex;
  if (!tx)
    if (auto held = program_.hold_target(action.egress_ifindex); !held)
      return std::unexpected(held.error());
  auto release = [&] {
    if (!tx) program_.release_target(action.egress_ifindex);
  };
  const vf_offload_value value{to_abi(action), 0, 0, 0};
  // The usual case, a key without an entry, is one system call. A key with one has it
  // deleted first and the new one inserted: a frame sees the old action or none, never a mix.
  bool replaced = false;
  for (;;) {
    std::fill(per_cpu_.begin(), per_cpu_.end(), value);
    if (bpf_map_update_elem(map_fd_, &key, per_cpu_.data(), BPF_NOEXIST) == 0) break;
    const int err = errno;
    if (err == EEXIST && !replaced) {
      auto old = remove(key);
      if (!old) {
        release();
        return std::unexpected(old.error());
      }
      replaced = true;
      continue;
    }
    release();
    if (err == E2BIG) return InstallStatus::TableFull;
    if (err == ENOMEM) return InstallStatus::NoMemory;
    return fail("offload: cannot install an entry: {}", errno_text(-err));
  }
  ++size_;
  if (auto on = set_active(true); !on) return std::unexpected(on.error());
  return replaced ? InstallStatus::Replaced : InstallStatus::Installed;
}

Result<std::optional<OffloadStats>> OffloadTable::remove(const OffloadKey& key) {
  // The entry's last counts and its removal in one system call: a lookup, then a delete, took
  // two, and the frames counted between them were lost with the entry.
  if (bpf_map_lookup_and_delete_elem(map_fd_, &key, per_cpu_.data())) {
    if (errno == ENOENT) return std::optional<OffloadStats>();
    return fail("offload: cannot remove an entry: {}", errno_text(-errno));
  }
  const OffloadStats last = sum();
  const uint32_t egress = per_cpu_[0].action.egress_ifindex;
  if (egress != key.ifindex) program_.release_target(egress);
  if (size_ > 0) --size_;
  if (size_ == 0)
    if (auto off = set_active(false); !off) return std::unexpected(off.error());
  return std::optional<OffloadStats>(last);
}

Result<std::optional<OffloadStats>> OffloadTable::read(const OffloadKey& key) const {
  auto found = lookup(key);
  if (!found) return std::unexpected(found.error());
  if (!*found) return std::optional<OffloadStats>();
  return std::optional<OffloadStats>(sum());
}

Result<void> OffloadTable::for_each(const std::function<void(const OffloadEntry&)>& fn) const {
  // kBatch entries a system call (BPF_MAP_LOOKUP_BATCH): a sweep of 64k entries one lookup
  // each took the control lcore ~100 ms of every 200.
  constexpr uint32_t kBatch = 256;
  const size_t cpus = per_cpu_.size();
  std::vector<OffloadKey> keys(kBatch);
  std::vector<vf_offload_value> values(size_t{kBatch} * cpus);
  uint32_t token = 0;
  bool first = true;
  for (;;) {
    uint32_t count = kBatch;
    const int r = bpf_map_lookup_batch(map_fd_, first ? nullptr : &token, &token, keys.data(),
                                       values.data(), &count, nullptr);
    const int err = r == 0 ? 0 : errno;
    if (r != 0 && err != ENOENT)
      return fail("offload: cannot walk the table: {}", errno_text(-err));
    first = false;
    for (uint32_t i = 0; i < count; ++i) {
      std::copy_n(values.begin() + ptrdiff_t(i * cpus), cpus, per_cpu_.begin());
      fn(OffloadEntry{keys[i], from_abi(per_cpu_[0].action), sum()});
    }
    if (err == ENOENT) return {};  // that was the last batch
  }
}

Result<void> OffloadTable::clear() {
  std::vector<OffloadKey> keys;
  if (auto r = for_each([&](const OffloadEntry& e) { keys.push_back(e.key); }); !r) return r;
  for (const auto& k : keys)
    if (auto r = remove(k); !r) return std::unexpected(r.error());
  size_ = 0;
  return set_active(false);
}

}  // namespace vecflow::steer
