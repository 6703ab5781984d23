#include "steer/flow_offloader.h"

#include <cstring>

#include "core/log.h"

namespace vecflow::steer {

std::string_view offload_refusal_name(OffloadRefusal r) noexcept {
  switch (r) {
    case OffloadRefusal::NoSteering:
      return "ingress_without_steering";
    case OffloadRefusal::NoInterface:
      return "egress_without_interface";
    case OffloadRefusal::TableFull:
      return "table_full";
    case OffloadRefusal::Stale:
      return "stale";
    case OffloadRefusal::Paused:
      return "paused";
    case OffloadRefusal::Failed:
      return "install_failed";
    case OffloadRefusal::NoMemory:
      return "no_memory";
    case OffloadRefusal::NoGate:
      return "gates_busy";
  }
  return "?";
}

OffloadSettings offload_settings(const config::OffloadSection& s) noexcept {
  return OffloadSettings{s.enabled, s.idle_timeout_ms, s.sweep_ms};
}

size_t FlowOffloader::KeyHash::operator()(const OffloadKey& k) const noexcept {
  return size_t(vf_flow_hash(&k.flow, 0)) * 31u + k.ifindex;
}

bool FlowOffloader::KeyEqual::operator()(const OffloadKey& a, const OffloadKey& b) const noexcept {
  return std::memcmp(&a, &b, sizeof(OffloadKey)) == 0;
}

FlowOffloader::FlowOffloader(OffloadFeed& feed, std::vector<OffloadPort> ports,
                             OffloadSettings settings, std::string blocker, bool decrement_ttl)
    : Service("offload"),
      feed_(feed),
      ports_(std::move(ports)),
      settings_(settings),
      blocker_(std::move(blocker)),
      decrement_ttl_(decrement_ttl),
      changes_seen_(feed.changes()) {
  for (size_t p = 0; p < ports_.size(); ++p) {
    feed_.set_port(uint16_t(p), ports_[p].table != nullptr, ports_[p].ifindex != 0);
    if (ports_[p].table) feed_.set_gates(uint16_t(p), ports_[p].table->gates());
  }
  apply_enabled();
}

// The entries stay: the steering programs, and their tables, go with vecflowd's stop.
FlowOffloader::~FlowOffloader() {
  feed_.set_enabled(false);
}

void FlowOffloader::apply_enabled() {
  feed_.set_enabled(settings_.enabled && blocker_.empty() && !paused_);
}

void FlowOffloader::configure(const OffloadSettings& settings) {
  settings_ = settings;
  next_sweep_ns_ = 0;
  apply_enabled();
  if (!settings_.enabled) flush("offload turned off");
}

bool FlowOffloader::poll() noexcept {
  // Off (and nothing left installed): a branch a round.
  if (!settings_.enabled && flows_.empty()) return false;
  bool did = false;
  const bool paused = paused_while_ && paused_while_();
  if (paused != paused_) {
    paused_ = paused;
    apply_enabled();
    if (paused_) flush("a capture or trace runs");
    did = true;
  }
  std::array<OffloadOffer, 64> batch;
  const size_t n = feed_.take(batch);
  const uint64_t now = OffloadTable::now_ns();
  for (size_t i = 0; i < n; ++i)
    consider(batch[i], now);
  if (!gated_.empty() && now >= next_gate_check_ns_) {
    check_gates(now);
    next_gate_check_ns_ = now + kGateCheckNs;
  }
  if (now >= next_sweep_ns_) {
    sweep(now);
    next_sweep_ns_ = now + uint64_t(settings_.sweep_ms) * 1'000'000u;
    did = true;
  }
  return did || n > 0;
}

void FlowOffloader::refuse(const OffloadOffer& o, OffloadRefusal r, uint64_t now) {
  ++stats_.refused[size_t(r)];
  if (refusals_.size() == kRecentRefusals) refusals_.pop_front();
  refusals_.push_back(OffloadRefused{o.key, o.in_port, o.out_port, r, now});
}

void FlowOffloader::consider(const OffloadOffer& o, uint64_t now) {
  ++stats_.offers;
  if (!settings_.enabled || !blocker_.empty()) return;  // made before offload was turned off
  if (paused_) return refuse(o, OffloadRefusal::Paused, now);
  // Decided by tables since replaced; the flow's packets decided by the new ones come again.
  const uint32_t seen = offload_changes_of(changes_seen_, o.key.ip_version);
  if (offload_changes_of(o.changes, o.key.ip_version) != seen ||
      offload_changes_of(feed_.changes(), o.key.ip_version) != seen)
    return refuse(o, OffloadRefusal::Stale, now);
  if (o.in_port >= ports_.size() || ports_[o.in_port].table == nullptr)
    return refuse(o, OffloadRefusal::NoSteering, now);
  if (o.out_port >= ports_.size() || ports_[o.out_port].ifindex == 0)
    return refuse(o, OffloadRefusal::NoInterface, now);
  OffloadPort& in = ports_[o.in_port];
  const OffloadKey key = offload_key(o.key, in.ifindex);
  if (flows_.contains(key)) return;  // its packets in flight before the entry came offered it
  if (now < in.retry_after_ns) return refuse(o, OffloadRefusal::NoMemory, now);
  OffloadAction action;
  action.dst_mac = o.dst_mac;
  action.src_mac = o.src_mac;
  action.egress_ifindex = ports_[o.out_port].ifindex;
  action.decrement_ttl = decrement_ttl_;
  action.rule_id = o.steer_rule;
  // What a NAT changed between the packet's arrival and its leaving.
  auto addr = [](const uint32_t* a) { return std::array<uint32_t, 4>{a[0], a[1], a[2], a[3]}; };
  if (addr(o.key.src) != addr(o.leaves.src) || o.key.src_port != o.leaves.src_port)
    action.snat = NatRewrite{addr(o.leaves.src), o.leaves.src_port};
  if (addr(o.key.dst) != addr(o.leaves.dst) || o.key.dst_port != o.leaves.dst_port)
    action.dnat = NatRewrite{addr(o.leaves.dst), o.leaves.dst_port};
  const auto gate = in.table->take_gate(now);
  if (!gate) return refuse(o, OffloadRefusal::NoGate, now);
  action.gate = *gate;
  auto r = in.table->install(key, action);
  if (!r || *r == InstallStatus::TableFull || *r == InstallStatus::NoMemory)
    in.table->release_gate(*gate, true, now);  // no entry ever named it
  if (!r) {
    if (install_failures_.report(now)) {
      log::get("steer")->warn("offload: port {}: {} ({} more since the last report)", in.name,
                              r.error().message, install_failures_.suppressed());
    }
    return refuse(o, OffloadRefusal::Failed, now);
  }
  if (*r == InstallStatus::TableFull) return refuse(o, OffloadRefusal::TableFull, now);
  if (*r == InstallStatus::NoMemory) {
    in.retry_after_ns = now + kNoMemoryPauseNs;
    return refuse(o, OffloadRefusal::NoMemory, now);
  }
  ++stats_.installed;
  flows_.emplace(
      key, OffloadedFlow{key, o.in_port, o.out_port, action, {}, now, o.session, *gate, 0, now});
  gated_.push_back(key);
}

void FlowOffloader::check_gates(uint64_t now) {
  size_t kept = 0;
  for (const OffloadKey& key : gated_) {
    auto it = flows_.find(key);
    if (it == flows_.end() || it->second.gate == 0) continue;  // removed, or seen open
    OffloadedFlow& f = it->second;
    OffloadTable& t = *ports_[f.in_port].table;
    bool open = t.gate_open(f.gate);
    if (!open) {
      const uint64_t lifted = t.gate_lifted(f.gate);
      if (lifted != f.gate_lifted) {
        f.gate_lifted = lifted;
        f.gate_moved_ns = now;
      }
      if (now - f.installed_ns >= kGateWaitNs && t.open_gate(f.gate, lifted)) {
        open = true;
        ++(now - f.gate_moved_ns >= kGateWaitNs ? stats_.gates_quiet : stats_.gates_forced);
      }
    }
    if (open) {
      t.release_gate(f.gate, true, now);
      f.gate = 0;
      ++stats_.gates_opened;
      continue;
    }
    gated_[kept++] = key;
  }
  gated_.resize(kept);
}

FlowOffloader::Flows::iterator FlowOffloader::remove(Flows::iterator it) {
  const OffloadedFlow& f = it->second;
  if (OffloadTable* t = ports_[f.in_port].table) {
    auto last = t->remove(f.key);
    // Frames lifted under a gate still closed may be in flight: it rests before its next use.
    if (f.gate) t->release_gate(f.gate, false, OffloadTable::now_ns());
    if (!last) {
      log::get("steer")->warn("offload: port {}: {}", ports_[f.in_port].name, last.error().message);
    } else if (*last) {
      stats_.removed_packets += (*last)->packets;
      stats_.removed_bytes += (*last)->bytes;
    }
  }
  return flows_.erase(it);
}

void FlowOffloader::flush(std::string_view why) {
  take_back(OffloadChange::Any, why);
}

void FlowOffloader::take_back(OffloadChange which, std::string_view why) {
  changes_seen_ = feed_.changes();
  ++stats_.flushes;
  size_t n = 0;
  for (auto it = flows_.begin(); it != flows_.end();) {
    if (uint64_t(which) & uint64_t(offload_change_of(it->second.key.flow.ip_version))) {
      it = remove(it);
      ++n;
    } else {
      ++it;
    }
  }
  stats_.flushed += n;
  if (n > 0) log::get("steer")->info("offload: {} flows back to user space: {}", n, why);
}

void FlowOffloader::sweep(uint64_t now) {
  const uint64_t changes = feed_.changes();
  uint64_t moved = 0;
  for (uint8_t v : {4, 6}) {
    if (offload_changes_of(changes, v) != offload_changes_of(changes_seen_, v))
      moved |= uint64_t(offload_change_of(v));
  }
  if (moved != 0) take_back(OffloadChange(moved), "routes, neighbours or rules changed");
  if (flows_.empty()) return;
  // Each table read whole, in batches: a few system calls, not one per entry.
  for (size_t p = 0; p < ports_.size(); ++p) {
    OffloadTable* t = ports_[p].table;
    bool again = false;
    for (size_t q = 0; q < p; ++q)
      again = again || ports_[q].table == t;
    if (t == nullptr || again) continue;
    auto r = t->for_each([this](const OffloadEntry& e) {
      auto it = flows_.find(e.key);
      if (it == flows_.end()) return;  // not ours (an adopted instance's)
      OffloadedFlow& f = it->second;
      if (e.stats.last_seen_ns != f.stats.last_seen_ns && f.session != kNoOffloadSession)
        feed_.keep_alive(f.session, f.key.flow.l4_proto);
      f.stats = e.stats;
    });
    if (!r) log::get("steer")->warn("offload: port {}: {}", ports_[p].name, r.error().message);
  }
  const uint64_t idle_ns = uint64_t(settings_.idle_timeout_ms) * 1'000'000u;
  for (auto it = flows_.begin(); it != flows_.end();) {
    OffloadedFlow& f = it->second;
    const uint64_t last = std::max(f.stats.last_seen_ns, f.installed_ns);
    if (now > last && now - last >= idle_ns) {
      ++stats_.idle_removed;
      it = remove(it);
    } else {
      ++it;
    }
  }
}

std::vector<OffloadedFlow> FlowOffloader::flows() const {
  std::vector<OffloadedFlow> out;
  out.reserve(flows_.size());
  for (const auto& [k, f] : flows_)
    out.push_back(f);
  return out;
}

}  // namespace vecflow::steer
