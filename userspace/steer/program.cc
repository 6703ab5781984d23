#include "steer/program.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/log.h"
#include "steer.skel.h"
#include "steer/offload_table.h"

namespace vecflow::steer {

static_assert(VF_STEER_ACTION_SLOTS >= VF_ACT_COUNT);
static_assert(VF_STEER_REASON_SLOTS >= VF_DROP_REASON_COUNT);
static_assert(VF_OFFLOAD_DECLINE_SLOTS >= VF_OFFLOAD_DECLINE_COUNT);

SteerCounters& SteerCounters::operator+=(const SteerCounters& o) {
  rx_packets += o.rx_packets;
  rx_bytes += o.rx_bytes;
  for (size_t i = 0; i < verdict.size(); ++i)
    verdict[i] += o.verdict[i];
  for (size_t i = 0; i < action.size(); ++i)
    action[i] += o.action[i];
  default_hits += o.default_hits;
  no_socket_fallback += o.no_socket_fallback;
  queue_not_read += o.queue_not_read;
  mtu_lifted += o.mtu_lifted;
  meta_unavailable += o.meta_unavailable;
  unconfigured += o.unconfigured;
  for (size_t i = 0; i < kDropReasonCount; ++i) {
    malformed[i] += o.malformed[i];
    drop[i] += o.drop[i];
  }
  offload_bytes += o.offload_bytes;
  for (size_t i = 0; i < offload_declined.size(); ++i)
    offload_declined[i] += o.offload_declined[i];
  xmit_drops += o.xmit_drops;
  if (rules.size() < o.rules.size()) rules.resize(o.rules.size());
  for (size_t i = 0; i < o.rules.size(); ++i) {
    rules[i].packets += o.rules[i].packets;
    rules[i].bytes += o.rules[i].bytes;
  }
  return *this;
}

void SteerDeleter::operator()(steer_bpf* s) const noexcept {
  steer_bpf__destroy(s);
}

SteerProgram::SteerProgram(SteerSkeleton skel, Fds fds, Limits limits)
    : skel_(std::move(skel)),
      fds_(fds),
      limits_(limits),
      offload_(new OffloadTable(*this, fds.offload, fds.offload_ctl, fds.offload_gates,
                                limits.offload_entries)) {}

SteerProgram::~SteerProgram() {
  for (int fd : owned_fds_)
    close(fd);
}

int SteerProgram::prog_fd() const noexcept {
  return fds_.prog;
}

int SteerProgram::xsks_map_fd() const noexcept {
  return fds_.xsks;
}

SteerProgram::Limits SteerProgram::limits_for(const CompiledRules& rules, uint32_t headroom) {
  // Floors keep small configurations cheap to grow; BPF_F_NO_PREALLOC means an unused hash
  // entry costs nothing, and a per-rule counter costs 16 bytes per CPU.
  Limits l;
  l.rules = std::max<uint32_t>(1024, rules.rule_count * headroom);
  l.rule_entries = std::max<uint32_t>(4096, uint32_t(rules.entries.size()) * headroom);
  return l;
}

bool kernel_allows_xdp_metadata() {
  // A three-instruction XDP program (multi-buffer, attach type BPF_XDP, as libbpf loads ours)
  // that asks for 8 bytes of metadata: a kernel that refuses the helper says EINVAL at the
  // load (the verifier: "program of this type cannot use helper bpf_xdp_adjust_meta"). Any
  // other failure (no privilege, no BPF) fails the real load too, with its own message.
  static const bool allowed = [] {
    // {code, dst_reg, src_reg, off, imm}
    const bpf_insn probe[] = {
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_2, 0, 0, -8},
        {BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_xdp_adjust_meta},
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_PASS},
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    bpf_prog_load_opts opts{};
    opts.sz = sizeof(opts);
    opts.expected_attach_type = BPF_XDP;
    opts.prog_flags = BPF_F_XDP_HAS_FRAGS;
    const int fd = bpf_prog_load(BPF_PROG_TYPE_XDP, "vf_meta_probe", "GPL", probe,
                                 sizeof(probe) / sizeof(probe[0]), &opts);
    if (fd >= 0) close(fd);
    const bool ok = fd >= 0 || errno != EINVAL;
    if (!ok) {
      log::get("steer")->warn(
          "this kernel refuses XDP metadata (bpf_xdp_adjust_meta): lifted frames carry none and "
          "are parsed in user space; offload gates open by time");
    }
    return ok;
  }();
  return allowed;
}

namespace {

constexpr uint64_t kOffloadPreallocBytes = uint64_t{256} << 20;

// Sizes the maps of an opened, not yet loaded object; metadata where the kernel allows it.
Result<void> prepare(steer_bpf* s, const SteerProgram::Limits& l) {
  s->rodata->vf_write_meta = kernel_allows_xdp_metadata() ? 1 : 0;
  // Both sets live side by side while one replaces the other.
  int err = bpf_map__set_max_entries(s->maps.vf_rules, l.rule_entries * VF_STEER_SETS);
  if (!err) err = bpf_map__set_max_entries(s->maps.vf_rule_stats, l.rules * VF_STEER_SETS);
  if (!err) err = bpf_map__set_max_entries(s->maps.vf_offload, l.offload_entries);
  // The offload table preallocates its entries where they fit kOffloadPreallocBytes: without,
  // each insert takes its per-CPU value from the kernel's per-CPU allocator, whose atomic
  // reserve ran out after 4-8k entries here (ENOMEM on every insert after, for seconds: the
  // 65536-flow rows of the offload benchmark). Beyond the budget (a table of 16k entries on a
  // machine of 200 possible CPUs) the entries are allocated on insert.
  const uint64_t bytes = uint64_t{l.offload_entries} *
                         uint64_t(std::max(libbpf_num_possible_cpus(), 1)) *
                         sizeof(vf_offload_value);
  if (!err && bytes <= kOffloadPreallocBytes)
    err = bpf_map__set_map_flags(s->maps.vf_offload,
                                 bpf_map__map_flags(s->maps.vf_offload) & ~BPF_F_NO_PREALLOC);
  if (err) return fail("steer: cannot size the BPF maps: {}", errno_text(err));
  return {};
}

}  // namespace

Result<std::unique_ptr<SteerProgram>> SteerProgram::load(const Limits& limits) {
  SteerSkeleton skel(steer_bpf__open());
  if (!skel) return fail("steer: cannot open the BPF object: {}", errno_text(-errno));
  if (auto r = prepare(skel.get(), limits); !r) return std::unexpected(r.error());
  if (int err = steer_bpf__load(skel.get()))
    return fail("steer: the kernel refused the XDP program: {} (see the steer log above)",
                errno_text(err));
  Fds fds;
  fds.prog = bpf_program__fd(skel->progs.vf_steer);
  fds.config = bpf_map__fd(skel->maps.vf_config);
  fds.sets = bpf_map__fd(skel->maps.vf_sets);
  fds.rules = bpf_map__fd(skel->maps.vf_rules);
  fds.rule_stats = bpf_map__fd(skel->maps.vf_rule_stats);
  fds.stats = bpf_map__fd(skel->maps.vf_stats);
  fds.devmap = bpf_map__fd(skel->maps.vf_devmap);
  fds.xsks = bpf_map__fd(skel->maps.xsks_map);
  fds.port_class = bpf_map__fd(skel->maps.vf_port_class);
  fds.offload = bpf_map__fd(skel->maps.vf_offload);
  fds.offload_ctl = bpf_map__fd(skel->maps.vf_offload_ctl);
  fds.offload_gates = bpf_map__fd(skel->maps.vf_flow_gates);
  return std::unique_ptr<SteerProgram>(new SteerProgram(std::move(skel), fds, limits));
}

Result<std::unique_ptr<SteerProgram>> SteerProgram::adopt(uint32_t prog_id) {
  std::vector<int> owned;
  auto unwind = [&](Error e) -> Result<std::unique_ptr<SteerProgram>> {
    for (int fd : owned)
      close(fd);
    return std::unexpected(std::move(e));
  };
  int prog = bpf_prog_get_fd_by_id(prog_id);
  if (prog < 0) return fail("steer: cannot open program {}: {}", prog_id, errno_text(-errno));
  owned.push_back(prog);
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog, &info, &len))
    return unwind(
        {fmt::format("steer: cannot inspect program {}: {}", prog_id, errno_text(-errno))});
  if (std::string_view(info.name) != VF_STEER_PROG_NAME)
    return unwind({fmt::format("steer: program {} is '{}', not vecflow's steering program", prog_id,
                               info.name)});
  std::vector<uint32_t> ids(info.nr_map_ids);
  bpf_prog_info with_maps{};
  with_maps.nr_map_ids = uint32_t(ids.size());
  with_maps.map_ids = reinterpret_cast<uint64_t>(ids.data());
  len = sizeof(with_maps);
  if (bpf_obj_get_info_by_fd(prog, &with_maps, &len))
    return unwind({fmt::format("steer: cannot list the maps of program {}: {}", prog_id,
                               errno_text(-errno))});

  Fds fds;
  fds.prog = prog;
  Limits limits;
  // The kernel keeps BPF_OBJ_NAME_LEN - 1 = 15 characters of a map's name: ours fit.
  const std::pair<const char*, int*> wanted[] = {{"vf_config", &fds.config},
                                                 {"vf_sets", &fds.sets},
                                                 {"vf_rules", &fds.rules},
                                                 {"vf_rule_stats", &fds.rule_stats},
                                                 {"vf_stats", &fds.stats},
                                                 {"vf_devmap", &fds.devmap},
                                                 {"xsks_map", &fds.xsks},
                                                 {"vf_port_class", &fds.port_class},
                                                 {"vf_offload", &fds.offload},
                                                 {"vf_offload_ctl", &fds.offload_ctl},
                                                 {"vf_flow_gates", &fds.offload_gates}};
  for (uint32_t id : ids) {
    int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    owned.push_back(fd);
    bpf_map_info mi{};
    uint32_t mlen = sizeof(mi);
    if (bpf_obj_get_info_by_fd(fd, &mi, &mlen)) continue;
    for (const auto& [name, slot] : wanted) {
      if (std::string_view(mi.name) != name) continue;
      *slot = fd;
      if (slot == &fds.rules) limits.rule_entries = mi.max_entries / VF_STEER_SETS;
      if (slot == &fds.rule_stats) limits.rules = mi.max_entries / VF_STEER_SETS;
      if (slot == &fds.offload) limits.offload_entries = mi.max_entries;
    }
  }
  for (const auto& [name, slot] : wanted)
    if (*slot < 0)
      return unwind(
          {fmt::format("steer: program {} has no map '{}' (another version?)", prog_id, name)});
  std::unique_ptr<SteerProgram> p(new SteerProgram(SteerSkeleton(), fds, limits));
  p->owned_fds_ = std::move(owned);
  p->contents_known_ = false;
  return p;
}

Result<SteerSkeleton> SteerProgram::open_sharing_maps() const {
  if (!skel_) return fail("steer: an adopted program is attached by its owner, not by vecflow");
  SteerSkeleton skel(steer_bpf__open());
  if (!skel) return fail("steer: cannot open the BPF object: {}", errno_text(-errno));
  if (auto r = prepare(skel.get(), limits_); !r) return std::unexpected(r.error());
  bpf_map* mine;
  bpf_object__for_each_map(mine, skel_->obj) {
    bpf_map* theirs = bpf_object__find_map_by_name(skel->obj, bpf_map__name(mine));
    // Maps without a name of ours (.rodata, .bss) are per instance and hold no state.
    if (!theirs) continue;
    if (int err = bpf_map__reuse_fd(theirs, bpf_map__fd(mine)))
      return fail("steer: cannot share map {}: {}", bpf_map__name(mine), errno_text(err));
  }
  return skel;
}

Result<void> SteerProgram::install(const CompiledRules& rules) {
  const uint32_t zero = 0;
  vf_steer_config cfg{};
  int cfg_fd = fds_.config;
  if (bpf_map_lookup_elem(cfg_fd, &zero, &cfg))
    return fail("steer: cannot read the live set: {}", errno_text(-errno));
  const uint32_t idle = cfg.active == 0 ? 0 : (cfg.active - 1) ^ 1;

  if (rules.rule_count > limits_.rules || rules.entries.size() > limits_.rule_entries) {
    return fail(
        "steer: the rule set needs {} rules / {} classifier entries but the loaded program holds "
        "{} / {}; restart vecflowd to load it with larger maps",
        rules.rule_count, rules.entries.size(), limits_.rules, limits_.rule_entries);
  }
  if (rules.set.tuple_count > VF_STEER_MAX_TUPLES)
    return fail("steer: {} rule shapes, at most {}", rules.set.tuple_count, VF_STEER_MAX_TUPLES);

  // The idle set was live until the last flip: let frames still using it finish.
  auto since = std::chrono::steady_clock::now() - last_flip_;
  if (since < kSetReuseGrace) std::this_thread::sleep_for(kSetReuseGrace - since);

  int rules_fd = fds_.rules;
  if (!contents_known_) {
    // An adopted instance: whatever it held in either set is unknown to us. Nothing reads the
    // idle set, so it is emptied now; the old live set's entries go at the next install.
    vf_rule_key k{}, next{};
    std::vector<vf_rule_key> all;
    const void* prev = nullptr;
    while (bpf_map_get_next_key(rules_fd, prev, &next) == 0) {
      all.push_back(next);
      k = next;
      prev = &k;
    }
    for (const auto& key : all) {
      if ((key.set_tuple >> 8) == idle) {
        bpf_map_delete_elem(rules_fd, &key);
      } else {
        installed_[idle ^ 1].push_back(key);
      }
    }
    contents_known_ = true;
  }
  for (const auto& k : installed_[idle])
    bpf_map_delete_elem(rules_fd, &k);
  installed_[idle].clear();

  // Per-rule counters of the idle set start from zero.
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return fail("steer: cannot count CPUs: {}", errno_text(cpus));
  std::vector<vf_rule_counter> zeros(size_t(cpus), vf_rule_counter{});
  int stats_fd = fds_.rule_stats;
  for (uint32_t id = 0; id < rules.rule_count; ++id) {
    uint32_t slot = idle * limits_.rules + id;
    if (bpf_map_update_elem(stats_fd, &slot, zeros.data(), BPF_ANY))
      return fail("steer: cannot reset rule counters: {}", errno_text(-errno));
  }

  installed_[idle].reserve(rules.entries.size());
  for (const auto& [key, value] : rules.entries) {
    vf_rule_key k = key;
    k.set_tuple = (idle << 8) | key.set_tuple;
    if (bpf_map_update_elem(rules_fd, &k, &value, BPF_NOEXIST)) {
      int err = -errno;
      for (const auto& done : installed_[idle])
        bpf_map_delete_elem(rules_fd, &done);
      installed_[idle].clear();
      return fail("steer: cannot add a classifier entry: {}", errno_text(err));
    }
    installed_[idle].push_back(k);
  }

  int devmap_fd = fds_.devmap;
  for (uint32_t ifindex : rules.redirect_ifindexes) {
    if (bpf_map_update_elem(devmap_fd, &ifindex, &ifindex, BPF_ANY))
      return fail("steer: cannot add redirect target ifindex {}: {}", ifindex, errno_text(-errno));
  }

  // Port classes of the idle set: one batch write per direction.
  int class_fd = fds_.port_class;
  std::vector<uint32_t> keys(VF_PORTS);
  for (uint32_t dir = 0; dir < 2; ++dir) {
    if (rules.port_class[dir].size() != VF_PORTS)
      return fail("steer: port class table of {} entries, expected {}",
                  rules.port_class[dir].size(), VF_PORTS);
    for (uint32_t p = 0; p < VF_PORTS; ++p)
      keys[p] = (idle * 2 + dir) * VF_PORTS + p;
    uint32_t count = VF_PORTS;
    if (bpf_map_update_batch(class_fd, keys.data(), rules.port_class[dir].data(), &count, nullptr))
      return fail("steer: cannot write the port classes: {}", errno_text(-errno));
  }

  vf_steer_set set = rules.set;
  set.rule_capacity = limits_.rules;
  if (bpf_map_update_elem(fds_.sets, &idle, &set, BPF_ANY))
    return fail("steer: cannot write the rule set: {}", errno_text(-errno));

  // The flip: one 32-bit store the program reads once per frame.
  cfg.active = idle + 1;
  if (bpf_map_update_elem(cfg_fd, &zero, &cfg, BPF_ANY))
    return fail("steer: cannot switch to the new rule set: {}", errno_text(-errno));
  last_flip_ = std::chrono::steady_clock::now();
  live_rule_count_ = rules.rule_count;

  // Redirect targets only the previous set used, or offload entries that are gone, go once no
  // frame can reach them.
  std::vector<uint32_t> unused;
  const auto& now = rules.redirect_ifindexes;
  auto in_use = [&](uint32_t t) {
    auto held = offload_targets_.find(t);
    return std::find(now.begin(), now.end(), t) != now.end() ||
           (held != offload_targets_.end() && held->second > 0);
  };
  for (uint32_t old : redirect_targets_)
    if (!in_use(old)) unused.push_back(old);
  for (auto it = offload_targets_.begin(); it != offload_targets_.end();) {
    if (it->second > 0) {
      ++it;
      continue;
    }
    if (!in_use(it->first)) unused.push_back(it->first);
    it = offload_targets_.erase(it);
  }
  if (!unused.empty()) std::this_thread::sleep_for(kSetReuseGrace);
  for (uint32_t t : unused)
    bpf_map_delete_elem(devmap_fd, &t);
  redirect_targets_ = rules.redirect_ifindexes;
  return {};
}

Result<void> SteerProgram::hold_target(uint32_t ifindex) {
  // A target some entry holds is in the devmap (install() removes only targets nothing holds):
  // only the first entry writes it. Written for every entry, each install paid a second
  // system call, and the devmap a new entry behind an RCU callback, for nothing.
  uint32_t& held = offload_targets_[ifindex];
  if (held == 0 && bpf_map_update_elem(fds_.devmap, &ifindex, &ifindex, BPF_ANY))
    return fail("steer: cannot add offload egress ifindex {}: {}", ifindex, errno_text(-errno));
  ++held;
  return {};
}

void SteerProgram::release_target(uint32_t ifindex) noexcept {
  auto it = offload_targets_.find(ifindex);
  if (it != offload_targets_.end() && it->second > 0) --it->second;
}

Result<SteerCounters> SteerProgram::counters() const {
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return fail("steer: cannot count CPUs: {}", errno_text(cpus));
  SteerCounters c;
  const uint32_t zero = 0;
  std::vector<vf_steer_stats> per_cpu(static_cast<size_t>(cpus));
  if (bpf_map_lookup_elem(fds_.stats, &zero, per_cpu.data()))
    return fail("steer: cannot read counters: {}", errno_text(-errno));
  for (const auto& s : per_cpu) {
    c.rx_packets += s.rx_packets;
    c.rx_bytes += s.rx_bytes;
    for (size_t i = 0; i < c.verdict.size(); ++i)
      c.verdict[i] += s.verdict[i];
    for (size_t i = 0; i < c.action.size(); ++i)
      c.action[i] += s.action[i];
    c.default_hits += s.default_hits;
    c.no_socket_fallback += s.no_socket_fallback;
    c.queue_not_read += s.queue_not_read;
    c.mtu_lifted += s.mtu_lifted;
    c.meta_unavailable += s.meta_unavailable;
    c.unconfigured += s.unconfigured;
    for (size_t i = 0; i < kDropReasonCount; ++i) {
      c.malformed[i] += s.malformed[i];
      c.drop[i] += s.drop[i];
    }
    c.offload_bytes += s.offload_bytes;
    for (size_t i = 0; i < c.offload_declined.size(); ++i)
      c.offload_declined[i] += s.offload_declined[i];
  }

  vf_steer_config cfg{};
  if (bpf_map_lookup_elem(fds_.config, &zero, &cfg))
    return fail("steer: cannot read the live set: {}", errno_text(-errno));
  if (cfg.active == 0) return c;
  const uint32_t live = cfg.active - 1;
  c.rules.resize(live_rule_count_);
  // One batched read per chunk of rules instead of one syscall per rule: with 100k rules the
  // per-rule reads were 100k bpf() calls per interface every sample. An array map's batch
  // walks keys in order from the one after `in_batch`.
  constexpr uint32_t kChunk = 4096;
  const size_t ncpu = static_cast<size_t>(cpus);
  std::vector<uint32_t> keys(kChunk);
  std::vector<vf_rule_counter> values(kChunk * ncpu);
  const uint32_t first = live * limits_.rules;
  for (uint32_t done = 0; done < live_rule_count_;) {
    uint32_t want = std::min(kChunk, live_rule_count_ - done);
    uint32_t count = want;
    uint32_t before = first + done - 1;  // unused when reading from slot 0
    uint32_t next = 0;
    int err = bpf_map_lookup_batch(fds_.rule_stats, first + done > 0 ? &before : nullptr, &next,
                                   keys.data(), values.data(), &count, nullptr);
    if (err && errno != ENOENT)
      return fail("steer: cannot read rule counters: {}", errno_text(-errno));
    if (count == 0) return fail("steer: rule counters end before rule {}", done);
    for (uint32_t i = 0; i < std::min(count, want); ++i) {
      const vf_rule_counter* per_cpu = &values[i * ncpu];
      for (size_t cpu = 0; cpu < ncpu; ++cpu) {
        c.rules[done + i].packets += per_cpu[cpu].packets;
        c.rules[done + i].bytes += per_cpu[cpu].bytes;
      }
    }
    done += std::min(count, want);
  }
  return c;
}

}  // namespace vecflow::steer
