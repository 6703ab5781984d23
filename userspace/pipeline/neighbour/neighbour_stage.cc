#include "pipeline/neighbour/neighbour_stage.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_ether.h>
#include <nlohmann/json.hpp>

#include "core/vlan.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/neighbour/neighbour_commands.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

NeighbourStage::NeighbourStage(const config::StageConfig& cfg, StageContext& ctx)
    : Stage(cfg.type, cfg.name, ctx.lcore_slots),
      table_(ctx.neighbours),
      policy_(cfg.params.get<NeighbourConfig>().unresolved),
      resolve_(ctx.kernel != nullptr),
      retry_tsc_(rte_get_tsc_hz() / 1000 * KernelSync::kResolveRetry.count()),
      lcores_(new LcoreState[ctx.lcore_slots]),
      slots_(ctx.lcore_slots),
      hold_packets_(cfg.params.get<NeighbourConfig>().hold_packets),
      hold_tsc_(rte_get_tsc_hz() / 1000 * cfg.params.get<NeighbourConfig>().hold_timeout_ms),
      check_tsc_(rte_get_tsc_hz() / 1'000'000 * kHoldCheckUs) {
  for (const PortInfo& p : ctx.ports) {
    bool known = p.mac != MacAddress{};
    port_mac_.push_back(known ? neighbour_word(p.mac) : 0);
    port_vlan_.push_back(p.vlan);
  }
  if (policy_ != Unresolved::Hold) return;
  // Every worker's queues, reserved now: holding a packet allocates nothing.
  holds_.reset(new HoldState[slots_]);
  for (unsigned i = 0; i < slots_; ++i) {
    HoldState& hs = holds_[i];
    hs.queues.resize(kHoldQueues);
    hs.pkts.resize(size_t{kHoldQueues} * hold_packets_);
    for (unsigned q = 0; q < kHoldQueues; ++q)
      hs.queues[q] = HoldQueue{
          {}, NeighbourTable::kNotFound, false, 0, 0, hs.pkts.data() + size_t{q} * hold_packets_};
  }
}

void NeighbourStage::set_port(PortId id, const PortInfo& info) {
  const uint16_t i = to_index(id);
  if (i >= port_mac_.size()) return;
  port_mac_[i] = info.mac != MacAddress{} ? neighbour_word(info.mac) : 0;
  port_vlan_[i] = info.vlan;
}

NeighbourStage::~NeighbourStage() {
  // Packets still held when no worker stopped (PipelineWorker::stop gives them all back).
  if (!holds_) return;
  for (unsigned i = 0; i < slots_; ++i) {
    for (HoldQueue& q : holds_[i].queues) {
      if (q.count) rte_pktmbuf_free_bulk(q.pkts, q.count);
    }
  }
}

Result<std::unique_ptr<NeighbourStage>> NeighbourStage::create(const config::StageConfig& cfg,
                                                               StageContext& ctx) {
  const auto& p = cfg.params.get<NeighbourConfig>();
  if (ctx.neighbours == nullptr) return fail("the neighbour stage needs the pipeline's table");
  std::unique_ptr<NeighbourStage> s(new NeighbourStage(cfg, ctx));
  for (const auto& e : p.entries) {
    auto id = ctx.neighbours->set_static(PortId{ctx.port_index(e.port)}, e.ip, e.mac);
    if (!id) return std::unexpected(id.error());
  }
  // Learning applies to ports with a kernel interface; without any there is nothing to learn.
  if (p.from_kernel && ctx.kernel != nullptr) {
    if (auto r = ctx.kernel->learn_neighbours(); !r) return std::unexpected(r.error());
  }
  return s;
}

bool NeighbourStage::unresolved(rte_mbuf* m, const NeighbourKey* key, uint32_t id, uint64_t now,
                                StageEnv& env) noexcept {
  if (id != NeighbourTable::kNotFound &&
      (table_->entry(id).word.load(std::memory_order_relaxed) & NeighbourEntry::kLocal)) {
    set_kernel(m);  // to the box itself: nothing to resolve
    return false;
  }
  if (resolve_) {
    if (id != NeighbourTable::kNotFound) {
      table_->request_resolution(id, now, retry_tsc_);
    } else if (key != nullptr) {
      table_->request_resolution(*key);
    }
  }
  switch (policy_) {
    case Unresolved::Hold:
      if (hold(holds_[env.slot()], m, key, id, now, env)) return true;
      set_drop(m, DropReason::NEIGH_UNRESOLVED);
      return false;
    case Unresolved::Kernel:
      set_kernel(m);
      return false;
    case Unresolved::Drop:
      set_drop(m, DropReason::NEIGH_UNRESOLVED);
      return false;
  }
  return false;
}

NeighbourStage::HoldQueue* NeighbourStage::held_queue(HoldState& hs, const NeighbourKey* key,
                                                      uint32_t id) noexcept {
  for (HoldQueue& q : hs.queues) {
    if (q.count == 0) continue;
    const bool same = key != nullptr
                          ? q.by_key && std::memcmp(&q.key, key, sizeof(NeighbourKey)) == 0
                          : !q.by_key && q.id == id;
    if (same) return &q;
  }
  return nullptr;
}

bool NeighbourStage::hold(HoldState& hs, rte_mbuf* m, const NeighbourKey* key, uint32_t id,
                          uint64_t now, StageEnv& env) noexcept {
  HoldQueue* q = hs.held != 0 ? held_queue(hs, key, id) : nullptr;
  if (q == nullptr) {
    for (HoldQueue& unused : hs.queues) {
      if (unused.count == 0) {
        q = &unused;
        break;
      }
    }
    if (q == nullptr) return false;  // kHoldQueues next hops wait already
    q->by_key = key != nullptr;
    if (key != nullptr) q->key = *key;
    q->id = id;
    q->deadline = now + hold_tsc_;
  } else if (q->count == hold_packets_) {
    return false;
  }
  q->pkts[q->count++] = m;
  ++hs.held;
  env.hold(m);
  return true;
}

bool NeighbourStage::tick(StageEnv& env, bool stop) noexcept {
  HoldState& hs = holds_[env.slot()];
  if (hs.held == 0) return false;
  const uint64_t now = rte_rdtsc();
  if (!stop && now - hs.checked < check_tsc_) return false;
  hs.checked = now;
  uint64_t sent = 0, dropped = 0;
  for (HoldQueue& q : hs.queues) {
    if (q.count == 0) continue;
    // A connected destination the table did not know: KernelSync makes its entry when it
    // asks the kernel.
    if (q.id == NeighbourTable::kNotFound) q.id = table_->find(q.key);
    uint64_t word = 0;
    if (q.id != NeighbourTable::kNotFound) {
      word = table_->entry(q.id).word.load(std::memory_order_relaxed);
    }
    const bool resolved = word & NeighbourEntry::kResolved;
    if (!resolved && !stop && static_cast<int64_t>(now - q.deadline) < 0) continue;
    for (uint16_t i = 0; i < q.count; ++i) {
      rte_mbuf* m = q.pkts[i];
      if (resolved) {
        // On to the stages after this one, as a packet resolved in process() goes.
        auto* eth = rte_pktmbuf_mtod(m, uint8_t*);
        std::memcpy(eth, &word, RTE_ETHER_ADDR_LEN);
        const uint64_t src = port_mac_[meta(m).out_port];
        if (src != 0) std::memcpy(eth + RTE_ETHER_ADDR_LEN, &src, RTE_ETHER_ADDR_LEN);
        meta(m).verdict = Verdict::Continue;
      } else {
        set_drop(m, DropReason::NEIGH_UNRESOLVED);
      }
      env.release(m);
    }
    if (resolved) {
      NeighbourEntry& e = table_->entry(q.id);
      if (e.used.load(std::memory_order_relaxed) == 0) e.used.store(1, std::memory_order_relaxed);
      sent += q.count;
    } else {
      dropped += q.count;
    }
    hs.held -= q.count;
    q.count = 0;
  }
  LcoreState& st = lcores_[env.slot()];
  st.held_sent.add(sent);
  st.held_dropped.add(dropped);
  return sent + dropped > 0;
}

namespace {

// A NeighbourKey as three words held in registers: built and compared there, and stored
// whole. (Built field by field in memory and then read back as words to compare it with the
// previous key, it stalled every packet on the store buffer.)
struct KeyWords {
  uint64_t w0;  // port, version, pad, ip[0..3]
  uint64_t w1;  // ip[4..11]
  uint32_t w2;  // ip[12..15]
  // The same key: an equal first word holds the same version, and an IPv4 key's other words
  // are zero in both, so an IPv4 destination is compared in one word. The all-zero key
  // (version 0) equals no key of a packet.
  bool same(const KeyWords& o) const noexcept {
    return w0 == o.w0 && (version() == 4 || (w1 == o.w1 && w2 == o.w2));
  }
  uint8_t version() const noexcept { return static_cast<uint8_t>(w0 >> 16); }
  void store(NeighbourKey& k) const noexcept {
    static_assert(sizeof(NeighbourKey) == 20 && offsetof(NeighbourKey, ip) == 4);
    auto* p = reinterpret_cast<uint8_t*>(&k);
    std::memcpy(p, &w0, 8);
    std::memcpy(p + 8, &w1, 8);
    std::memcpy(p + 16, &w2, 4);
  }
};

// The neighbour key of a connected destination: the packet's own destination on its egress
// port. False for a packet that is not IP.
bool destination_key(rte_mbuf* m, uint16_t port, KeyWords& k) noexcept {
  static_assert(std::endian::native == std::endian::little);
  if (pkt::is_ipv4(m)) {
    uint32_t dst;
    std::memcpy(&dst, &pkt::ipv4(m)->dst_addr, 4);
    k.w0 = uint64_t{port} | uint64_t{4} << 16 | uint64_t{dst} << 32;
    k.w1 = 0;
    k.w2 = 0;
    return true;
  }
  if (pkt::is_ipv6(m)) {
    const uint8_t* dst = pkt::ipv6(m)->dst_addr;
    uint32_t first;
    std::memcpy(&first, dst, 4);
    std::memcpy(&k.w1, dst + 4, 8);
    std::memcpy(&k.w2, dst + 12, 4);
    k.w0 = uint64_t{port} | uint64_t{6} << 16 | uint64_t{first} << 32;
    return true;
  }
  return false;
}

// The Ethernet addresses given to packets to the last resolved next hop: its MAC and the
// egress port's, as an 8- and a 4-byte store (destination, then source), made again only when
// the next hop or the port changes. Most packets of a vector go where the packet before them
// went. Inlined into NeighbourStage::process, whose loop it is part of.
struct MacWriter {
  MacWriter(const uint64_t* port_macs, const VlanTags* port_vlans) noexcept
      : port_mac(port_macs), port_vlan(port_vlans) {}
  // A new next hop (its NeighbourEntry word), leaving through `port`.
  [[gnu::always_inline]] void next_hop(uint64_t word, uint16_t port) noexcept {
    dst_word = word;
    prepare(port);
  }
  [[gnu::always_inline]] void write(rte_mbuf* m, uint16_t port) noexcept {
    static_assert(std::endian::native == std::endian::little);
    if (port != last_port) prepare(port);
    // To a VLAN port: its tags go in here, where the header is in cache, rather than when the
    // port sends the packet (which then touched every frame's line again: ~9 % of an engine
    // core with every packet tagged).
    if (vlan.outer_tpid != 0) [[unlikely]] {
      write_tagged(m);
      return;
    }
    write_addresses(m);
  }
  // The frame gets room for the tags and its whole header in 8-byte stores (addresses and
  // outer tag from `head` and `tagged_tail`): the addresses under the old header are never
  // moved, since they are overwritten. Without room for the tags (a clone) or without the
  // port's MAC, vlan_push moves them; failing that the port tags a copy.
  [[gnu::always_inline]] void write_tagged(rte_mbuf* m) noexcept {
    const uint16_t bytes = vlan.inner_tpid == 0 ? 4 : 8;
    if (src_word != 0 && vlan_detail::can_push(m, bytes)) [[likely]] {
      uint8_t* eth = vlan_detail::open_header(m, bytes);
      std::memcpy(eth, &head, 8);
      std::memcpy(eth + 8, &tagged_tail, 8);
      if (bytes == 8) {
        std::memcpy(eth + 16, &inner_tag, 4);
        m->vlan_tci = vlan.inner_tci;
        m->vlan_tci_outer = vlan.outer_tci;
      } else {
        m->vlan_tci = vlan.outer_tci;
      }
      meta(m).flags |= kMetaFlagTagged;
      ++written;
      return;
    }
    if (vlan_push(m, vlan)) meta(m).flags |= kMetaFlagTagged;
    write_addresses(m);
  }
  [[gnu::always_inline]] void write_addresses(rte_mbuf* m) noexcept {
    auto* eth = rte_pktmbuf_mtod(m, uint8_t*);
    if (src_word != 0) [[likely]] {
      std::memcpy(eth, &head, 8);
      std::memcpy(eth + 8, &tail, 4);
    } else {  // the port's MAC is unknown: the source stays as it is
      std::memcpy(eth, &dst_word, RTE_ETHER_ADDR_LEN);
    }
    ++written;
  }
  [[gnu::always_inline]] void prepare(uint16_t port) noexcept {
    last_port = port;
    src_word = port_mac[port];
    vlan = port_vlan[port];
    head = (dst_word & 0xffffffffffffull) | src_word << 48;
    tail = static_cast<uint32_t>(src_word >> 16);
    tagged_tail = uint64_t{tail} | uint64_t{rte_cpu_to_be_16(vlan.outer_tpid)} << 32 |
                  uint64_t{rte_cpu_to_be_16(vlan.outer_tci)} << 48;
    inner_tag = uint32_t{rte_cpu_to_be_16(vlan.inner_tpid)} |
                uint32_t{rte_cpu_to_be_16(vlan.inner_tci)} << 16;
  }

  const uint64_t* port_mac;   // by port, NeighbourEntry word form, 0: keep the source
  const VlanTags* port_vlan;  // by port: the tags of a VLAN port, none for the others
  VlanTags vlan;              // last_port's
  uint64_t dst_word = 0;      // MAC of the last resolved next hop
  uint16_t last_port = kNoPort;
  uint64_t src_word = 0;  // MAC of last_port
  uint64_t head = 0;
  uint32_t tail = 0;
  uint64_t tagged_tail = 0;  // tail, then the outer tag (a VLAN port's)
  uint32_t inner_tag = 0;    // a QinQ port's inner tag
  uint64_t written = 0;      // packets given addresses: resolved
};

}  // namespace

void NeighbourStage::process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept {
  static_assert(kBatch <= NeighbourTable::kMaxBulk);
  const uint64_t now = env.now();
  const size_t nports = port_mac_.size();
  uint64_t unresolved_n = 0, unplaced = 0, held = 0;
  // Policy hold: this worker's held packets. A packet to a next hop with packets held here
  // joins them (it must not overtake them), even when the next hop has just been resolved.
  HoldState* const hs = holds_ ? &holds_[env.slot()] : nullptr;

  // Most packets of a vector go to the next hop of the packet before them (a few gateways, a
  // few directly connected servers): the last resolved next hop is kept, and a packet going
  // there costs two stores. The others wait for one bulk lookup per batch.
  uint32_t last_id = NeighbourTable::kNotFound;  // a gateway's id, resolved
  KeyWords last_key{};  // a connected destination's key, resolved; all zero: none
  MacWriter mac(port_mac_.data(), port_vlan_.data());
  // Resolves entry `id` for a packet: rewrites it (and remembers the entry) or applies the
  // unresolved policy. Returns whether it was resolved.
  auto resolve = [&](rte_mbuf* m, uint16_t port, uint32_t id, const NeighbourKey* key) noexcept {
    if (id == NeighbourTable::kNotFound) {
      ++unresolved_n;
      held += unresolved(m, key, id, now, env);
      return false;
    }
    NeighbourEntry& e = table_->entry(id);
    const uint64_t word = e.word.load(std::memory_order_relaxed);
    if (!(word & NeighbourEntry::kResolved)) {
      ++unresolved_n;
      held += unresolved(m, key, id, now, env);
      return false;
    }
    if (hs != nullptr && hs->held != 0 && held_queue(*hs, key, id) != nullptr) [[unlikely]] {
      ++unresolved_n;
      if (hold(*hs, m, key, id, now, env)) {
        ++held;
      } else {
        set_drop(m, DropReason::NEIGH_UNRESOLVED);
      }
      return false;
    }
    if (e.used.load(std::memory_order_relaxed) == 0) e.used.store(1, std::memory_order_relaxed);
    mac.next_hop(word, port);
    mac.write(m, port);
    return true;
  };

  // Raw storage: NeighbourKey's member initialisers would zero all of it on every call.
  alignas(8) unsigned char key_bytes[kBatch][NeighbourTable::kKeyStride];
  auto key_at = [&](unsigned k) { return reinterpret_cast<NeighbourKey*>(key_bytes[k]); };
  const NeighbourKey* key_ptrs[kBatch];
  KeyWords key_words[kBatch];
  uint32_t found[kBatch];
  uint8_t waiting[kBatch];  // packets of the batch that wait for the bulk lookup
  uint8_t key_of[kBatch];   // ... and the key each one waits for

  for (size_t base = 0; base < pkts.size(); base += kBatch) {
    const unsigned n = static_cast<unsigned>(std::min<size_t>(kBatch, pkts.size() - base));
    rte_mbuf** batch = pkts.data() + base;
    unsigned nwait = 0, nkeys = 0;
    bool looked_up = false;
    for (unsigned i = 0; i < n; ++i) {
      rte_mbuf* m = batch[i];
      const PacketMeta& pm = meta(m);
      const uint16_t port = pm.out_port;
      if (port >= nports) {  // kNoPort: no stage placed it
        ++unplaced;
        continue;
      }
      if (pm.nexthop < kNextHopConnected) {  // a gateway: its entry, no hash lookup
        if (pm.nexthop == last_id) {
          mac.write(m, port);
        } else if (resolve(m, port, pm.nexthop, nullptr)) {
          last_id = pm.nexthop;
          last_key = KeyWords{};
        }
        continue;
      }
      // Connected destination (or placed by a stage that chose no next hop): the next hop is
      // the destination itself.
      KeyWords k;
      if (!destination_key(m, port, k)) {
        ++unplaced;
        continue;
      }
      if (k.same(last_key)) {
        mac.write(m, port);
        continue;
      }
      if (!looked_up) {
        // The batch's first miss is looked up now, so that the packets behind it to the same
        // destination find it remembered; later misses wait for one bulk lookup.
        looked_up = true;
        NeighbourKey& key = *key_at(0);
        k.store(key);
        if (resolve(m, port, table_->find(key), &key)) {
          last_key = k;
          last_id = NeighbourTable::kNotFound;
          continue;
        }
        // Unresolved: the unresolved policy was applied to this packet; the next ones to
        // this destination wait for the bulk lookup like any other miss.
        continue;
      }
      if (nkeys == 0 || !k.same(key_words[nkeys - 1])) {
        key_words[nkeys] = k;
        k.store(*key_at(nkeys));
        key_ptrs[nkeys] = key_at(nkeys);
        ++nkeys;
      }
      waiting[nwait] = static_cast<uint8_t>(i);
      key_of[nwait++] = static_cast<uint8_t>(nkeys - 1);
    }
    if (nwait == 0) continue;
    table_->find_bulk(key_ptrs, nkeys, found);
    for (unsigned w = 0; w < nwait; ++w) {
      rte_mbuf* m = batch[waiting[w]];
      const unsigned k = key_of[w];
      if (resolve(m, meta(m).out_port, found[k], key_at(k))) {
        last_key = key_words[k];
        last_id = NeighbourTable::kNotFound;
      }
    }
  }
  LcoreState& st = lcores_[env.slot()];
  st.resolved.add(mac.written);
  st.unresolved.add(unresolved_n);
  st.unplaced.add(unplaced);
  if (held) st.held.add(held);
}

NeighbourCounters NeighbourStage::counters() const noexcept {
  NeighbourCounters c;
  for (unsigned i = 0; i < slots_; ++i) {
    c.resolved += lcores_[i].resolved.load();
    c.unresolved += lcores_[i].unresolved.load();
    c.unplaced += lcores_[i].unplaced.load();
    c.held += lcores_[i].held.load();
    c.held_sent += lcores_[i].held_sent.load();
    c.held_dropped += lcores_[i].held_dropped.load();
  }
  return c;
}

size_t NeighbourStage::describe(rte_mbuf* m, std::span<char> out) const noexcept {
  const PacketMeta& pm = meta(m);
  fmt::format_to_n_result<char*> r{out.data(), 0};
  if (pm.verdict == Verdict::Held) {
    r = fmt::format_to_n(out.data(), out.size(), "held until the next hop resolves");
  } else if (pm.verdict == Verdict::Transmit || pm.verdict == Verdict::Continue) {
    const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
    const uint8_t* a = eth->dst_addr.addr_bytes;
    r = fmt::format_to_n(out.data(), out.size(),
                         "dst mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", a[0], a[1], a[2],
                         a[3], a[4], a[5]);
  }
  return std::min(out.size(), r.size);
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_neighbour_stage(const config::StageConfig& cfg,
                                                    StageContext& ctx) {
  auto s = NeighbourStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

NeighbourConfig read_neighbour(config::Ctx& ctx, config::MapReader& m) {
  NeighbourConfig s;
  config::for_each_item(ctx, m.child("static"), m.key_path("static"),
                        [&](const YAML::Node& item, const std::string& ip) {
                          config::MapReader r(ctx, item, ip, {"ip", "mac", "port"});
                          if (!r.ok()) return;
                          StaticNeighbour e;
                          std::optional<IpAddress> a;
                          std::optional<MacAddress> mac;
                          bool ok = r.require("ip") && r.get_address("ip", a);
                          ok = r.require("mac") && r.get_mac("mac", mac) && ok;
                          ok = r.require("port") && r.get("port", e.port) && ok;
                          if (!ok) return;
                          e.ip = *a;
                          e.mac = *mac;
                          s.entries.push_back(e);
                        });
  m.get("from_kernel", s.from_kernel);
  m.get_enum<Unresolved>(
      "unresolved", s.unresolved,
      {{"hold", Unresolved::Hold}, {"kernel", Unresolved::Kernel}, {"drop", Unresolved::Drop}});
  m.get("hold_packets", s.hold_packets, 1, kMaxHoldPackets);
  m.get("hold_timeout_ms", s.hold_timeout_ms, 1, 60'000);
  return s;
}

void check_neighbour(config::StageCheck& c, const NeighbourConfig& n) {
  for (size_t ni = 0; ni < n.entries.size(); ++ni) {
    c.port_exists(n.entries[ni].port, c.node({"static", ni, "port"}),
                  c.path(fmt::format(".static[{}].port", ni)));
  }
  // Held packets are given back on the worker that holds them, which runs the stages of the
  // neighbour stage's group after it, and nothing beyond.
  const auto& pipeline = c.config().pipeline;
  for (size_t sj = c.index() + 1; sj < pipeline.size(); ++sj) {
    if (n.unresolved != Unresolved::Hold || pipeline[sj].fuse) continue;
    c.error(c.node({"unresolved"}), c.path(".unresolved"),
            fmt::format("unresolved: hold (the default) sends held packets from the worker that "
                        "holds them, so the stages after it must run there: fuse stage '{}' to "
                        "it (fuse: true), or choose unresolved: kernel or drop",
                        pipeline[sj].name));
    break;
  }
}

Json neighbour_json(const NeighbourConfig& p) {
  Json entries = Json::array();
  for (const auto& e : p.entries)
    entries.push_back({{"ip", e.ip.to_string()}, {"mac", e.mac.to_string()}, {"port", e.port}});
  return {{"static", std::move(entries)},
          {"from_kernel", p.from_kernel},
          {"unresolved", std::string(unresolved_name(p.unresolved))},
          {"hold_packets", p.hold_packets},
          {"hold_timeout_ms", p.hold_timeout_ms}};
}

// Static entries live in the pipeline's one neighbour table: the entries `from` had and `to`
// lacks are cleared, the new and changed ones set.
Result<void> apply_statics(Stage&, const StageContext& ctx, const config::AnyStageParams& from,
                           const config::AnyStageParams& to) {
  using Statics = std::map<std::string, const StaticNeighbour*>;
  auto collect = [](const NeighbourConfig& n) {
    Statics m;
    for (const auto& e : n.entries)
      m[e.port + " " + e.ip.to_string()] = &e;
    return m;
  };
  const Statics before = collect(from.get<NeighbourConfig>());
  const Statics after = collect(to.get<NeighbourConfig>());
  auto port_id = [&ctx](const std::string& name) { return PortId{ctx.port_index(name)}; };
  NeighbourTable& table = *ctx.neighbours;
  std::vector<const StaticNeighbour*> set;
  for (const auto& [key, e] : after) {
    auto old = before.find(key);
    if (old != before.end() && old->second->mac == e->mac) continue;
    if (auto r = table.set_static(port_id(e->port), e->ip, e->mac); !r) {
      // Put back the entries this call already changed.
      for (const auto* done : set) {
        auto prev = before.find(done->port + " " + done->ip.to_string());
        if (prev != before.end()) {
          (void)table.set_static(port_id(done->port), done->ip, prev->second->mac);
        } else {
          table.clear_static(port_id(done->port), done->ip);
        }
      }
      return fail("static neighbour {} on {}: {}", e->ip.to_string(), e->port, r.error().message);
    }
    set.push_back(e);
  }
  for (const auto& [key, e] : before) {
    if (!after.contains(key)) table.clear_static(port_id(e->port), e->ip);
  }
  return {};
}

std::vector<std::pair<std::string, std::string>> neighbour_ports(const config::AnyStageParams& p) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : p.get<NeighbourConfig>().entries)
    out.emplace_back("static neighbour " + e.ip.to_string(), e.port);
  return out;
}

}  // namespace

StageModule neighbour_stage_module() {
  return StageModule{
      config::stage_type<NeighbourConfig>(
          "neighbour", {"static", "from_kernel", "unresolved", "hold_packets", "hold_timeout_ms"},
          read_neighbour, neighbour_json, check_neighbour),
      make_neighbour_stage,
      [](const config::AnyStageParams&) { return true; },
      {{{"static", "static entry", "static entries",
         [](const Json& n) {
           return fmt::format("{} on {}", n["ip"].get<std::string>(), n["port"].get<std::string>());
         }}},
       apply_statics,
       neighbour_ports},
      control::add_neighbour_commands,
      [](const config::AnyStageParams& p) -> uint64_t {
        const auto& n = p.get<NeighbourConfig>();
        return n.unresolved == Unresolved::Hold
                   ? uint64_t{NeighbourStage::kHoldQueues} * n.hold_packets
                   : 0;
      }};
}

}  // namespace vecflow
