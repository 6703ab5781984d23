// Fuzzes the forwarding pipeline on one vector: the fuzzer's bytes become up to kMaxFrames
// frames, received as a DPDK port receives them (classify_rx: port, metadata, one software
// parse; malformed frames dropped at rx or, when the port keeps them, delivered as non-IP),
// then run through a pipeline of acl, route, neighbour, l2, mirror and count built from an
// appliance file, group by group as the scheduler runs it.
//
// Invariants: every packet that entered ends in exactly one place (transmitted, handed to the
// kernel, or dropped under one reason: rx = tx + to_kernel + drops, charged to its ingress
// port); transmitted packets name a real port; every mbuf is a valid mbuf afterwards and none
// is lost (the pool is full again). The ports' MTUs are small (wan 1280, lan 576) and have
// addresses, so the route stage answers (time exceeded, fragmentation needed, packet too
// big) and so does the acl's reject rule (administratively prohibited): an answer goes back
// out of its ingress port, is a well-formed ICMP error no larger
// than RFC 1812 / RFC 4443 allow, never answers an ICMP error or a multicast or broadcast
// source, and the answers stay within the stage's rate. A transmitted IPv4 packet without DF
// over its egress MTU is cut by the tx adapter's fragmenter here: fragments that fit, with
// valid headers, whose payloads put together are the packet's. The tail room of each frame's buffer
// is poisoned for ASan, so a stage reading or writing past the frame's end in its mbuf is reported
// (DPDK's pool memory is otherwise invisible to ASan).
//
// Input: records of [flags][length, 2 bytes little-endian][frame bytes]; flags bit 0 is the
// ingress port (wan/lan), bit 1 keeps malformed frames (steering.malformed: pass), bit 2 sets
// an IPv4 frame's header checksum right, so that frames get past the route stage's check (a
// fuzzer seldom finds a right checksum by itself).
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "config/config.h"
#include "core/accounting.h"
#include "core/ipv4_fragment.h"
#include "core/packet.h"
#include "core/port_mtu.h"
#include "fuzz_check.h"
#include "io/rx_classify.h"
#include "pipeline/acl/acl_stage.h"
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_worker.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/stage_registry.h"
#include "runtime/qsbr.h"
#include "support/eal_env.h"

using namespace vecflow;

namespace {

constexpr const char* kAppliance = R"(
ports:
  - {name: wan, type: dpdk, devargs: net_null0}
  - {name: lan, type: dpdk, devargs: net_null1}
pipeline:
  - stage: acl
    sched: parallel
    default: permit
    rules:
      - {name: no-telnet, action: deny, proto: tcp, dst_port: 23}
      - {name: dns, action: permit, src: 192.0.2.0/24, proto: udp, dst_port: 53}
      - {name: v6-block, action: deny, src: "2001:db8:1::/48", proto: tcp}
      - {name: no-smb, action: reject, proto: tcp, dst_port: 445}
  - stage: route
    icmp_time_exceeded: true
    routes:
      - {prefix: 198.51.100.0/24, port: lan}
      - {prefix: 0.0.0.0/0, via: 192.0.2.254, port: wan}
      - {prefix: 192.0.2.1/32, action: kernel}
      - {prefix: 203.0.113.0/24, action: drop}
      - prefix: "2001:db8:2::/48"
        nexthops:
          - {via: "2001:db8:ffff::1", port: lan}
          - {via: "2001:db8:ffff::2", port: lan}
      - {prefix: "::/0", via: "2001:db8:ffff::9", port: wan}
  - stage: neighbour
    fuse: true
    from_kernel: false
    unresolved: drop
    static:
      - {ip: 192.0.2.254, mac: "02:00:00:00:00:fe", port: wan}
      - {ip: 198.51.100.1, mac: "02:00:00:00:01:01", port: lan}
      - {ip: "2001:db8:ffff::1", mac: "02:00:00:00:02:01", port: lan}
      - {ip: "2001:db8:ffff::9", mac: "02:00:00:00:02:09", port: wan}
  - stage: l2
    fuse: true
    ports:
      - {port: wan, vlan_push: 100}
      - {port: lan, vlan_pop: true}
  - stage: mirror
    fuse: true
    match: {proto: udp, dst_port: 53}
    to: {port: lan}
    snaplen: 96
  - stage: count
    by: flow
    max_flows: 1024
)";

constexpr uint16_t kPorts = 2;
// Frames per vector: the largest vector the scheduler hands a worker.
constexpr size_t kMaxFrames = 256;
// Twice a vector, so a leak shows as a pool that does not refill rather than as exhaustion.
constexpr unsigned kPoolSize = 2 * kMaxFrames;

// Takes what the pipeline hands on; the harness frees it afterwards.
struct CollectSinks final : Sinks {
  std::vector<rte_mbuf*> tx, to_kernel, later, copied;
  void transmit(std::span<rte_mbuf*> p) noexcept override {
    tx.insert(tx.end(), p.begin(), p.end());
  }
  void kernel(std::span<rte_mbuf*> p) noexcept override {
    to_kernel.insert(to_kernel.end(), p.begin(), p.end());
  }
  void next(std::span<rte_mbuf*> p) noexcept override {
    later.insert(later.end(), p.begin(), p.end());
  }
  void copies(std::span<rte_mbuf*> p) noexcept override {
    copied.insert(copied.end(), p.begin(), p.end());
  }
};

struct Harness {
  std::unique_ptr<Qsbr> qsbr;
  PortMtuTable mtus{kPorts};
  OutcomeTable outcomes{1, kPorts};
  std::unique_ptr<Pipeline> pipeline;
  std::unique_ptr<PipelineWorker> worker;
  rte_mempool* pool = nullptr;

  Harness() {
    const std::string& why = test::init_eal();
    if (!why.empty()) {
      std::fprintf(stderr, "pipeline_fuzz: EAL did not start: %s\n", why.c_str());
      std::abort();
    }
    auto cfg = config::load_config_text(kAppliance, "pipeline_fuzz.yaml", builtin_stage_types());
    FUZZ_CHECK(cfg.has_value());
    qsbr = std::move(*Qsbr::create(1));
    StageContext ctx;
    ctx.ports = {PortInfo{"wan", MacAddress{{0x02, 0xaa, 0, 0, 0, 1}}, ""},
                 PortInfo{"lan", MacAddress{{0x02, 0xbb, 0, 0, 0, 1}}, ""}};
    ctx.qsbr = qsbr.get();
    ctx.capture_dir = "/nonexistent";
    mtus.set(0, 1280);
    mtus.set(1, 576);
    ctx.mtus = &mtus;
    auto p = Pipeline::build(cfg->pipeline, ctx);
    if (!p) {
      std::fprintf(stderr, "pipeline_fuzz: %s\n", p.error().message.c_str());
      std::abort();
    }
    pipeline = std::move(*p);
    std::vector<PortAddresses> addrs(kPorts);
    addrs[0] = {*parse_ip_address("192.0.2.1"), *parse_ip_address("2001:db8:1::1")};
    addrs[1] = {*parse_ip_address("198.51.100.1"), *parse_ip_address("2001:db8:2::1")};
    pipeline->find<RouteStage>("route")->icmp_responder().set_port_addresses(addrs);
    pipeline->find<AclStage>("acl")->icmp_responder().set_port_addresses(addrs);
    worker = std::make_unique<PipelineWorker>(*pipeline, outcomes, 0);
    // No per-lcore cache: the pool's count is exact after every run.
    pool = rte_pktmbuf_pool_create("fuzz_pipeline", kPoolSize, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                   SOCKET_ID_ANY);
    FUZZ_CHECK(pool != nullptr);
  }
};

void unpoison(rte_mbuf* m) {
  ASAN_UNPOISON_MEMORY_REGION(m->buf_addr, m->buf_len);
}

// Poisons the buffer from the end of the frame to the end of the buffer.
void poison_tail(rte_mbuf* m) {
  uint8_t* end = rte_pktmbuf_mtod_offset(m, uint8_t*, m->data_len);
  uint8_t* buf_end = static_cast<uint8_t*>(m->buf_addr) + m->buf_len;
  ASAN_POISON_MEMORY_REGION(end, size_t(buf_end - end));
}

void check_mbuf(const rte_mbuf* m) {
  const char* why = nullptr;
  if (rte_mbuf_check(m, 1, &why) != 0) {
    std::fprintf(stderr, "pipeline_fuzz: bad mbuf: %s\n", why);
    std::abort();
  }
}

bool icmp4_error_type(uint8_t type) {
  return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
}

// An answer the route stage built in a packet's buffer: an ICMP error back out of the port the
// packet came in on, about a packet that was no ICMP error and came from a unicast source.
void check_answer(rte_mbuf* m) {
  FUZZ_CHECK(meta(m).out_port == m->port);
  const uint8_t* l3 = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len);
  const uint32_t l3_bytes = m->pkt_len - m->l2_len;
  if (RTE_ETH_IS_IPV4_HDR(m->packet_type)) {
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(l3);
    FUZZ_CHECK(ip->next_proto_id == IPPROTO_ICMP && rte_ipv4_cksum(ip) == 0);
    FUZZ_CHECK(l3_bytes <= 576 && rte_be_to_cpu_16(ip->total_length) == l3_bytes);
    const uint8_t* icmp = l3 + sizeof(rte_ipv4_hdr);
    FUZZ_CHECK(icmp[0] == 3 || icmp[0] == 11);  // unreachable, too big; time exceeded
    const uint8_t dst_first = reinterpret_cast<const uint8_t*>(&ip->dst_addr)[0];
    FUZZ_CHECK(ip->dst_addr != 0 && dst_first < 224);
    const auto* quoted = reinterpret_cast<const rte_ipv4_hdr*>(icmp + 8);
    const uint32_t quoted_ihl = rte_ipv4_hdr_len(quoted);
    FUZZ_CHECK((rte_be_to_cpu_16(quoted->fragment_offset) & RTE_IPV4_HDR_OFFSET_MASK) == 0);
    if (quoted->next_proto_id == IPPROTO_ICMP && 28 + quoted_ihl < l3_bytes)
      FUZZ_CHECK(!icmp4_error_type(icmp[8 + quoted_ihl]));
  } else {
    FUZZ_CHECK(RTE_ETH_IS_IPV6_HDR(m->packet_type));
    const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(l3);
    FUZZ_CHECK(ip->proto == IPPROTO_ICMPV6 && l3_bytes <= 1280);
    const uint8_t* icmp = l3 + sizeof(rte_ipv6_hdr);
    FUZZ_CHECK(icmp[0] >= 1 && icmp[0] <= 3);  // no route, too big, time exceeded
    FUZZ_CHECK(ip->dst_addr[0] != 0xff);
    const auto* quoted = reinterpret_cast<const rte_ipv6_hdr*>(icmp + 8);
    if (quoted->proto == IPPROTO_ICMPV6 && 48 + 40 < l3_bytes)
      FUZZ_CHECK(icmp[8 + 40] >= 128);  // no answer about an ICMPv6 error
  }
}

// What the tx adapter does with a transmitted IPv4 packet without DF over its egress MTU: cut
// it. The fragments fit, carry valid headers and continuous offsets, and put together are the
// packet's payload; then they are freed (the packet stays with the caller).
void check_fragments(rte_mbuf* m, uint32_t mtu) {
  rte_mbuf* frags[kMaxFragments];
  const unsigned n = ipv4_fragment(m, mtu, frags);
  if (n == 0) return;  // more fragments than allowed, or an MTU too small: dropped as too big
  const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, m->l2_len);
  const uint32_t ihl = rte_ipv4_hdr_len(ip);
  const uint32_t total =
      std::min<uint32_t>(rte_be_to_cpu_16(ip->total_length), m->data_len - m->l2_len);
  const uint8_t* payload = reinterpret_cast<const uint8_t*>(ip) + ihl;
  const uint32_t first = (rte_be_to_cpu_16(ip->fragment_offset) & RTE_IPV4_HDR_OFFSET_MASK) * 8u;
  uint32_t at = 0;
  for (unsigned i = 0; i < n; ++i) {
    rte_mbuf* f = frags[i];
    check_mbuf(f);
    const auto* fip = rte_pktmbuf_mtod_offset(f, const rte_ipv4_hdr*, f->l2_len);
    const uint32_t len = rte_be_to_cpu_16(fip->total_length);
    FUZZ_CHECK(len <= mtu && f->pkt_len == f->l2_len + len && rte_ipv4_cksum(fip) == 0);
    FUZZ_CHECK(rte_ipv4_hdr_len(fip) == ihl);
    const uint16_t off = rte_be_to_cpu_16(fip->fragment_offset);
    FUZZ_CHECK((off & RTE_IPV4_HDR_OFFSET_MASK) * 8u == first + at);
    FUZZ_CHECK(std::memcmp(reinterpret_cast<const uint8_t*>(fip) + ihl, payload + at, len - ihl) ==
               0);
    at += len - ihl;
  }
  FUZZ_CHECK(at == total - ihl);
  rte_pktmbuf_free_bulk(frags, n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness h;
  const AccountingSnapshot before = h.outcomes.total_snapshot();

  // Receive: the frames of the input, as a DPDK port's rx path finishes them.
  std::vector<rte_mbuf*> pkts;
  uint64_t rx_dropped = 0;
  size_t at = 0;
  while (at + 3 <= size && pkts.size() + rx_dropped < kMaxFrames) {
    const uint8_t flags = data[at];
    size_t len = size_t(data[at + 1]) | size_t(data[at + 2]) << 8;
    at += 3;
    len = std::min({len, size - at, size_t(RTE_MBUF_DEFAULT_DATAROOM)});
    rte_mbuf* m = rte_pktmbuf_alloc(h.pool);
    FUZZ_CHECK(m != nullptr);
    unpoison(m);
    std::memcpy(rte_pktmbuf_append(m, uint16_t(len)), data + at, len);
    at += len;
    poison_tail(m);
    RxClassify c;
    c.port = PortId{uint16_t(flags & 1)};
    c.drop_malformed = !(flags & 2);
    c.flow_id = FlowIdSource::Software;
    PortOutcomes& o = h.outcomes.at(0, c.port);
    o.rx_packets.add();
    o.rx_bytes.add(len);
    if (auto bad = classify_rx(m, c, false)) {
      o.drops.add(*bad);
      ++rx_dropped;
      rte_pktmbuf_free(m);
      continue;
    }
    if ((flags & 4) && RTE_ETH_IS_IPV4_HDR(m->packet_type)) {
      auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
      ip->hdr_checksum = 0;
      ip->hdr_checksum = rte_ipv4_cksum(ip);
    }
    pkts.push_back(m);
  }
  const size_t received = pkts.size();

  // Every group in turn, as the scheduler would (what a group hands on goes to the next).
  CollectSinks sinks;
  for (size_t g = 0; g < h.pipeline->groups().size() && !pkts.empty(); ++g) {
    sinks.later.clear();
    h.worker->run_vector(g, pkts, sinks);
    pkts = sinks.later;
  }
  FUZZ_CHECK(sinks.later.empty() || h.pipeline->groups().empty());

  // The fragmenter below takes buffers from the pool: none is poisoned from here on (each is
  // poisoned again when a later run receives a frame into it).
  rte_mempool_obj_iter(
      h.pool,
      [](rte_mempool*, void*, void* obj, unsigned) { unpoison(static_cast<rte_mbuf*>(obj)); },
      nullptr);
  // Exactly one outcome per packet.
  std::set<rte_mbuf*> seen;
  for (rte_mbuf* m : sinks.tx) {
    FUZZ_CHECK(seen.insert(m).second);
    FUZZ_CHECK(meta(m).verdict == Verdict::Transmit && meta(m).out_port < kPorts);
    FUZZ_CHECK(m->port < kPorts);
    if (meta(m).flags & kMetaFlagCopy) {
      check_answer(m);
    } else if (RTE_ETH_IS_IPV4_HDR(m->packet_type) &&
               m->pkt_len - m->l2_len > h.mtus.get(meta(m).out_port)) {
      check_fragments(m, h.mtus.get(meta(m).out_port));
    }
  }
  for (rte_mbuf* m : sinks.to_kernel) {
    FUZZ_CHECK(seen.insert(m).second);
    FUZZ_CHECK(meta(m).verdict == Verdict::Kernel);
  }
  for (rte_mbuf* m : sinks.copied) {
    FUZZ_CHECK(seen.insert(m).second);
    FUZZ_CHECK(meta(m).verdict == Verdict::Transmit && meta(m).out_port < kPorts);
    FUZZ_CHECK(meta(m).flags & kMetaFlagCopy);
  }
  // An ICMP error built in a packet's buffer leaves with the vector, charged to no port: the
  // packet it answered was counted as a drop.
  const uint64_t made = static_cast<uint64_t>(std::count_if(
      sinks.tx.begin(), sinks.tx.end(), [](rte_mbuf* m) { return meta(m).flags & kMetaFlagCopy; }));
  // Within the rate: each kind (the route stage's time exceeded, unreachable and too big, the
  // acl's reject) at most the default icmp.per_second a second.
  static const uint64_t start = rte_get_tsc_cycles();
  static uint64_t answers = 0;
  answers += made;
  const uint64_t seconds = (rte_get_tsc_cycles() - start) / rte_get_tsc_hz() + 1;
  FUZZ_CHECK(answers <= 4 * uint64_t{config::IcmpSection{}.per_second} * seconds);
  AccountingSnapshot after = h.outcomes.total_snapshot();
  const uint64_t dropped = after.dropped() - before.dropped();
  FUZZ_CHECK(after.rx - before.rx == received + rx_dropped);
  FUZZ_CHECK(dropped ==
             rx_dropped + (received - (sinks.tx.size() - made) - sinks.to_kernel.size()));
  after.tx = before.tx + sinks.tx.size() - made;
  after.to_kernel = before.to_kernel + sinks.to_kernel.size();
  FUZZ_CHECK(after.unaccounted() == before.unaccounted());
  for (uint16_t p = 0; p < kPorts; ++p) {
    AccountingSnapshot s = h.outcomes.port_snapshot(PortId{p});
    FUZZ_CHECK(s.tx == 0 && s.to_kernel == 0);  // counted where the sinks take them
  }

  for (auto* v : {&sinks.tx, &sinks.to_kernel, &sinks.copied}) {
    for (rte_mbuf* m : *v) {
      check_mbuf(m);
      unpoison(m);
      rte_pktmbuf_free(m);
    }
  }
  FUZZ_CHECK(rte_mempool_avail_count(h.pool) == kPoolSize);
  return 0;
}
