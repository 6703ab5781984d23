// The packet pool's UMEM layout, buffers lent to the kernel, the metadata-to-mbuf mapping, and
// the port base's status.

#include <set>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/stage_type.h"
#include "core/flow.h"
#include "core/packet.h"
#include "core/parse.h"
#include "core/vlan.h"
#include "io/packet_pool.h"
#include "io/port.h"
#include "io/port_factory.h"
#include "io/rx_classify.h"
#include "io/vlan/vlan_port.h"
#include "support/eal_env.h"
#include "support/frame_builder.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

PacketPool& pool() {
  static std::unique_ptr<PacketPool> p = [] {
    if (!init_eal().empty()) std::abort();
    PacketPoolOptions o;
    o.name = "vpo_unit_pool";
    o.mbufs = 3999;  // not a whole number of pages' worth (2 buffers each): rounded up
    o.cache = 32;
    auto r = PacketPool::create(o);
    if (!r) {
      fprintf(stderr, "%s\n", r.error().message.c_str());
      std::abort();
    }
    return std::move(*r);
  }();
  return *p;
}

TEST(PacketPool, EveryBufferIsOneUmemChunk) {
  PacketPool& p = pool();
  EXPECT_EQ(p.layout(), PoolLayout::Aligned);
  EXPECT_EQ(p.count(), 4000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.base()) % 4096, 0u) << "a UMEM starts on a page";
  EXPECT_EQ(p.bytes(), 4000u * 2048u);
  EXPECT_EQ(p.data_room(), 2048 - 192);
  std::vector<rte_mbuf*> all(p.count());
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(p.mempool(), all.data(), p.count()), 0);
  EXPECT_EQ(p.in_use(), p.count());
  std::set<uint64_t> chunks;
  for (rte_mbuf* m : all) {
    uint64_t a = p.frame_addr(m);
    EXPECT_EQ(a % 2048, 0u);
    EXPECT_LT(a, p.bytes());
    chunks.insert(a / 2048);
    EXPECT_EQ(p.mbuf_of(a), m);
    // Any byte of the chunk leads back to the mbuf, and its data offset is where it lies.
    uint64_t data = p.data_addr(m);
    EXPECT_EQ(data, a + PacketPool::kBufferOffset + m->data_off);
    EXPECT_EQ(p.mbuf_of(data), m);
    EXPECT_EQ(p.data_off_of(data), m->data_off);
    EXPECT_EQ(rte_pktmbuf_data_room_size(p.mempool()), p.data_room());
  }
  EXPECT_EQ(chunks.size(), p.count()) << "one mbuf per chunk, every chunk used";
  rte_pktmbuf_free_bulk(all.data(), p.count());
  EXPECT_EQ(p.in_use(), 0u);
}

// The Spread layout: objects an odd number of cache lines apart (so the same field of
// consecutive mbufs falls in different cache sets), each a chunk of an unaligned-chunk UMEM,
// never across a page of the memory; addresses carry the chunk's start and, in their top 16
// bits, the data's offset, as the kernel writes them.
TEST(PacketPool, SpreadBuffersCoverEveryCacheSet) {
  if (!init_eal().empty()) GTEST_SKIP() << "no EAL";
  PacketPoolOptions o;
  o.name = "vpo_unit_spread";
  o.mbufs = 1000;
  o.cache = 0;
  o.layout = PoolLayout::Spread;
  auto r = PacketPool::create(o);
  ASSERT_TRUE(r) << r.error().message;
  PacketPool& p = **r;
  EXPECT_EQ(p.count(), 1000u);
  EXPECT_EQ(p.chunk_size(), 2048u + PacketPool::kSpreadPad);
  EXPECT_EQ(p.data_room(), p.chunk_size() - PacketPool::kBufferOffset);
  EXPECT_EQ(rte_pktmbuf_data_room_size(p.mempool()), p.data_room());
  std::vector<rte_mbuf*> all(p.count());
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(p.mempool(), all.data(), p.count()), 0);
  std::set<uintptr_t> sets;  // L1 set of each mbuf's first line (64 sets of 64-byte lines)
  std::set<uint64_t> chunks;
  size_t page = 0;
  ASSERT_EQ(rte_mempool_get_page_size(p.mempool(), &page), 0);
  for (rte_mbuf* m : all) {
    const uint64_t a = p.frame_addr(m);
    EXPECT_LE(a + p.chunk_size(), p.bytes());
    EXPECT_EQ(a / page, (a + p.chunk_size() - 1) / page) << "a chunk across a page";
    chunks.insert(a);
    sets.insert(reinterpret_cast<uintptr_t>(m) / 64 % 64);
    EXPECT_EQ(p.mbuf_of(a), m);
    m->data_off = 100;
    const uint64_t data = p.data_addr(m);
    EXPECT_EQ(data & PacketPool::kAddrMask, a);
    EXPECT_EQ(data >> PacketPool::kOffsetShift, PacketPool::kBufferOffset + 100);
    EXPECT_EQ(p.mbuf_of(data), m);
    EXPECT_EQ(p.data_off_of(data), 100);
    EXPECT_TRUE(p.contains(data));
  }
  EXPECT_FALSE(p.contains(p.bytes()));
  EXPECT_EQ(chunks.size(), p.count());
  // An odd number of lines between objects walks every set; within a page the objects are
  // back to back. (On 4 KiB pages, tests without hugepages, one object fits a page: the
  // layout only spreads with hugepages, which is when vecflowd chooses it.)
  EXPECT_EQ(p.chunk_size() / 64 % 2, 1u);
  for (uint64_t a : chunks) {
    const uint64_t next = a + p.chunk_size();
    if (next / page == a / page && (next + p.chunk_size() - 1) / page == a / page) {
      EXPECT_TRUE(chunks.contains(next) || next + p.chunk_size() > p.bytes());
    }
  }
  if (page >= 64 * p.chunk_size()) {
    EXPECT_EQ(sets.size(), 64u) << "the mbufs' first lines should fall in every cache set";
  }
  rte_pktmbuf_free_bulk(all.data(), p.count());
}

TEST(PacketPool, ClosingALenderFreesExactlyWhatItStillLends) {
  PacketPool& p = pool();
  auto a = p.open_lender();
  auto b = p.open_lender();
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  std::vector<rte_mbuf*> bufs(10);
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(p.mempool(), bufs.data(), 10), 0);
  for (int i = 0; i < 4; ++i)
    bufs[i]->port = *a;
  for (int i = 4; i < 7; ++i)
    bufs[i]->port = *b;
  EXPECT_GE(bufs[0]->port, PacketPool::kLentTagBase);
  EXPECT_EQ(p.close_lender(*a), 4u);
  EXPECT_EQ(p.in_use(), 6u);
  EXPECT_EQ(p.close_lender(*b), 3u);
  EXPECT_EQ(p.in_use(), 3u);
  rte_pktmbuf_free_bulk(bufs.data() + 7, 3);
  EXPECT_EQ(p.in_use(), 0u);
  // A freed tag is handed out again.
  auto c = p.open_lender();
  ASSERT_TRUE(c);
  EXPECT_EQ(p.close_lender(*c), 0u);
}

TEST(PacketPool, RejectsFrameSizesAUmemCannotUse) {
  PacketPoolOptions o;
  o.name = "vpo_bad";
  o.frame_size = 3000;
  auto r = PacketPool::create(o);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, testing::HasSubstr("2048 or 4096"));
}

// The XDP metadata says what the software parse says, for every kind of frame.
TEST(RxClassify, MetadataGivesWhatASoftwareParseGives) {
  PacketPool& p = pool();
  RxClassify c;
  c.port = PortId{9};
  std::vector<Bytes> frames = {
      FrameBuilder().ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 6, 8).tcp(1, 2).build(),
      FrameBuilder()
          .vlan(5)
          .vlan(6, 0x88a8)
          .ipv4(ip4(1, 2, 3, 4), ip4(5, 6, 7, 8), 17)
          .udp(3, 4)
          .build(),
      FrameBuilder().ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), 58).icmp(128).build(),
      FrameBuilder().ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17, 0, 0x2001).udp(1, 2).build(),
      FrameBuilder()
          .ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), 0)
          .ext6(0, 132)
          .sctp(7, 8)
          .build(),
  };
  for (const Bytes& f : frames) {
    ParsedFrame parsed;
    ASSERT_FALSE(parse_frame(f, parsed));
    rte_mbuf* soft = rte_pktmbuf_alloc(p.mempool());
    std::memcpy(rte_pktmbuf_append(soft, static_cast<uint16_t>(f.size())), f.data(), f.size());
    ASSERT_FALSE(classify_rx(soft, c, false));

    // The same frame as the XDP program would lift it: metadata in front.
    rte_mbuf* lifted = rte_pktmbuf_alloc(p.mempool());
    std::memcpy(rte_pktmbuf_append(lifted, static_cast<uint16_t>(f.size())), f.data(), f.size());
    auto* md = rte_pktmbuf_mtod_offset(lifted, vf_xdp_meta*, -int(sizeof(vf_xdp_meta)));
    *md = vf_xdp_meta{};
    md->flow_hash = flow_hash(parsed.key, true);
    md->rule_id = 3;
    md->vlan_tci = parsed.vlan_tci;
    md->l3_len = parsed.l3_len;
    md->l2_len = static_cast<uint8_t>(parsed.l2_len);
    md->ip_version = parsed.key.ip_version;
    md->l4_proto = parsed.key.l4_proto;
    md->flags = parsed.flags & (VF_META_FRAGMENT | VF_META_LATER_FRAG | VF_META_VLAN);
    md->magic = VF_XDP_META_MAGIC;
    ASSERT_FALSE(classify_rx(lifted, c, true));

    EXPECT_EQ(lifted->port, 9);
    EXPECT_EQ(lifted->hash.rss, soft->hash.rss);
    EXPECT_EQ(lifted->packet_type, soft->packet_type);
    EXPECT_EQ(lifted->l2_len, soft->l2_len);
    EXPECT_EQ(lifted->l3_len, soft->l3_len);
    EXPECT_EQ(meta(lifted).steer_rule, 3);
    EXPECT_EQ(meta(soft).steer_rule, kNoRule);
    EXPECT_EQ(md->magic, 0) << "consumed";
    rte_pktmbuf_free(soft);
    rte_pktmbuf_free(lifted);
  }
}

TEST(RxClassify, MalformedFramesAreDroppedOrDeliveredAsNonIp) {
  PacketPool& p = pool();
  Bytes bad = FrameBuilder().ipv4(ip4(1, 1, 1, 1), ip4(2, 2, 2, 2), 6).tcp(1, 2).build(30);
  RxClassify c;
  rte_mbuf* m = rte_pktmbuf_alloc(p.mempool());
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(bad.size())), bad.data(), bad.size());
  auto why = classify_rx(m, c, false);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, DropReason::IPV4_TRUNCATED);
  c.drop_malformed = false;
  EXPECT_FALSE(classify_rx(m, c, false));
  EXPECT_EQ(m->packet_type, 0u);
  EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_RX_RSS_HASH) << "a flow id all the same";
  rte_pktmbuf_free(m);
}

// A burst classified at once (its common frames hashed in a second pass) gives each frame
// what classifying it alone gives, keeps the well-formed ones in order and drops and counts
// the malformed ones; frames that keep the NIC's RSS hash keep it.
TEST(RxClassify, ABurstGivesEachFrameWhatItGetsAlone) {
  PacketPool& p = pool();
  std::vector<Bytes> frames;
  for (uint8_t i = 0; i < 40; ++i) {
    switch (i % 5) {
      case 0:
        frames.push_back(
            FrameBuilder().ipv4(ip4(10, 0, 0, i), ip4(10, 0, 1, 2), 17).udp(i, 53).build());
        break;
      case 1:
        frames.push_back(FrameBuilder()
                             .ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), 6)
                             .tcp(uint16_t(1000 + i), 443)
                             .build());
        break;
      case 2:  // not common: a VLAN tag, then a fragment
        frames.push_back(
            FrameBuilder().vlan(i).ipv4(ip4(1, 2, 3, i), ip4(5, 6, 7, 8), 6).tcp(i, 2).build());
        break;
      case 3:
        frames.push_back(FrameBuilder()
                             .ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, i), 17, 0, 0x2001)
                             .udp(1, 2)
                             .build());
        break;
      default:  // malformed: cut inside the TCP header
        frames.push_back(
            FrameBuilder().ipv4(ip4(1, 1, 1, i), ip4(2, 2, 2, 2), 6).tcp(1, 2).build(30));
        break;
    }
  }
  const auto mbuf_of = [&](const Bytes& f, bool with_rss) {
    rte_mbuf* m = rte_pktmbuf_alloc(p.mempool());
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
    if (with_rss) {
      m->hash.rss = 0xabc00000u + static_cast<uint32_t>(f.size());
      m->ol_flags |= RTE_MBUF_F_RX_RSS_HASH;
    }
    return m;
  };
  for (const FlowIdSource from : {FlowIdSource::Software, FlowIdSource::Rss}) {
    SCOPED_TRACE(static_cast<int>(from));
    RxClassify c;
    c.port = PortId{4};
    c.flow_id = from;
    const bool rss = from == FlowIdSource::Rss;
    std::vector<rte_mbuf*> alone, burst;
    for (const Bytes& f : frames) {
      rte_mbuf* m = mbuf_of(f, rss);
      if (classify_rx(m, c, false)) {
        rte_pktmbuf_free(m);
      } else {
        alone.push_back(m);
      }
      burst.push_back(mbuf_of(f, rss));
    }
    DropCounters drops;
    uint64_t bytes = 0;
    const uint16_t kept =
        classify_burst(burst.data(), static_cast<uint16_t>(burst.size()), c, false, drops, bytes);
    ASSERT_EQ(kept, alone.size());
    EXPECT_EQ(drops.total(), frames.size() - kept);
    EXPECT_EQ(kept, 32u);
    uint64_t want_bytes = 0;
    for (uint16_t i = 0; i < kept; ++i) {
      SCOPED_TRACE(i);
      const rte_mbuf* a = alone[i];
      const rte_mbuf* b = burst[i];
      want_bytes += a->pkt_len;
      EXPECT_EQ(rte_pktmbuf_pkt_len(b), rte_pktmbuf_pkt_len(a));
      EXPECT_EQ(0, std::memcmp(rte_pktmbuf_mtod(b, const void*), rte_pktmbuf_mtod(a, const void*),
                               a->data_len));
      EXPECT_EQ(b->hash.rss, a->hash.rss);
      EXPECT_EQ(b->ol_flags & RTE_MBUF_F_RX_RSS_HASH, RTE_MBUF_F_RX_RSS_HASH);
      EXPECT_EQ(b->packet_type, a->packet_type);
      EXPECT_EQ(b->l2_len, a->l2_len);
      EXPECT_EQ(b->l3_len, a->l3_len);
      EXPECT_EQ(b->port, 4);
    }
    EXPECT_EQ(bytes, want_bytes);
    for (rte_mbuf* m : alone)
      rte_pktmbuf_free(m);
    for (uint16_t i = 0; i < kept; ++i)
      rte_pktmbuf_free(burst[i]);
  }
}

// A port that receives and sends nothing.
class FakePort final : public Port {
 public:
  FakePort() : Port("fake", PortId{1}) { size_counters(2, 2); }
  std::string_view kind() const noexcept override { return "fake"; }
  uint16_t rx_queue_count() const noexcept override { return 2; }
  uint16_t tx_queue_count() const noexcept override { return 2; }
  uint16_t rx_burst(uint16_t, rte_mbuf**, uint16_t) noexcept override { return 0; }
  uint16_t tx_burst(uint16_t, rte_mbuf**, uint16_t) noexcept override { return 0; }
  LinkState link_state() const noexcept override { return LinkState::Up; }
  Result<void> start() override { return {}; }
  void stop() noexcept override {}
};

// A burst of UDP frames (`tags` each: (TPID, TCI) pairs, outer first) classified on port 4
// with `demux`, beside the same frame received untagged: what the burst kept, what it dropped.
struct DemuxRun {
  DemuxRun(const std::vector<std::vector<std::pair<uint16_t, uint16_t>>>& tags,
           const VlanDemux& demux) {
    const auto udp = [](const std::vector<std::pair<uint16_t, uint16_t>>& t) {
      FrameBuilder b;
      for (const auto& [tpid, tci] : t)
        b.vlan(tci, tpid);
      return b.ipv4(ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 17).udp(7, 9).payload(20).build();
    };
    const auto mbuf = [](const Bytes& f) {
      rte_mbuf* m = rte_pktmbuf_alloc(pool().mempool());
      std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
      return m;
    };
    for (const auto& t : tags)
      kept.push_back(mbuf(udp(t)));
    untagged = mbuf(udp({}));
    EXPECT_FALSE(classify_rx(untagged, RxClassify{}, false));
    RxClassify c;
    c.port = PortId{4};
    c.vlans = &demux;
    kept.resize(
        classify_burst(kept.data(), static_cast<uint16_t>(kept.size()), c, false, drops, bytes));
  }
  ~DemuxRun() {
    for (rte_mbuf* m : kept)
      rte_pktmbuf_free(m);
    rte_pktmbuf_free(untagged);
  }
  // Each kept frame is the untagged one, on its port of `ports`.
  void expect_untagged_on(const std::vector<uint16_t>& ports) const {
    ASSERT_EQ(kept.size(), ports.size());
    for (size_t i = 0; i < kept.size(); ++i) {
      SCOPED_TRACE(i);
      const rte_mbuf* m = kept[i];
      EXPECT_EQ(m->port, ports[i]);
      ASSERT_EQ(m->pkt_len, untagged->pkt_len);
      EXPECT_EQ(0, std::memcmp(rte_pktmbuf_mtod(m, const void*),
                               rte_pktmbuf_mtod(untagged, const void*), untagged->data_len));
      EXPECT_EQ(m->l2_len, untagged->l2_len);
      EXPECT_EQ(m->l3_len, untagged->l3_len);
      EXPECT_EQ(m->packet_type, untagged->packet_type);
      EXPECT_EQ(m->hash.rss, untagged->hash.rss) << "a flow's hash does not depend on its VLAN";
    }
    EXPECT_EQ(bytes, kept.size() * untagged->pkt_len);
  }

  std::vector<rte_mbuf*> kept;
  rte_mbuf* untagged = nullptr;
  DropCounters drops;
  uint64_t bytes = 0;
};

// A parent with VLAN sub-interfaces: a frame tagged with a claimed VLAN leaves the burst as the
// sub-interface's, untagged, with the fields of the same frame sent untagged; an untagged one
// stays the parent's; a VLAN no one claims, an 802.1ad tag of a claimed 802.1Q id and two tags
// are vlan_unknown drops.
TEST(RxClassify, TaggedFramesBecomeTheirSubInterfacesUntagged) {
  VlanDemux demux;
  demux.claim(RTE_ETHER_TYPE_VLAN, 100, 5);
  demux.claim(RTE_ETHER_TYPE_VLAN, 200, 6);
  const DemuxRun r({{{0x8100, 0x2000 | 100}},         // priority 1, VLAN 100: port 5
                    {},                               // untagged: the parent, port 4
                    {{0x8100, 200}},                  // VLAN 200: port 6
                    {{0x8100, 300}},                  // nobody's
                    {{0x88a8, 100}},                  // 802.1ad
                    {{0x8100, 100}, {0x8100, 100}}},  // two tags
                   demux);
  r.expect_untagged_on({5, 4, 6});
  EXPECT_EQ(r.drops.load(DropReason::VLAN_UNKNOWN), 3u);
  EXPECT_EQ(r.drops.total(), 3u);
  for (size_t i = 0; i < r.kept.size(); ++i)
    EXPECT_EQ(bool(r.kept[i]->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED), i != 1);
  EXPECT_EQ(r.kept[0]->vlan_tci, 0x2000 | 100) << "the tag's TCI, priority included";
}

// QinQ: a service VLAN (802.1ad 300, port 7) with two customer VLANs inside (802.1Q 10 and
// 11, ports 8 and 9). A customer's frame leaves the burst as its port's with both tags gone and
// both TCIs kept; the service tag alone is the service VLAN's; a customer VLAN no one claims, the
// same ids under an 802.1Q outer tag, an 802.1ad tag inside, and three tags are vlan_unknown.
TEST(RxClassify, QinqFramesBecomeTheirCustomerVlansUntagged) {
  VlanDemux demux;
  demux.claim(RTE_ETHER_TYPE_QINQ, 300, 7);
  demux.claim_inner(RTE_ETHER_TYPE_QINQ, 300, 10, 8);
  demux.claim_inner(RTE_ETHER_TYPE_QINQ, 300, 11, 9);
  const DemuxRun r({{{0x88a8, 300}, {0x8100, 0x4000 | 10}},       // customer 10: port 8
                    {{0x88a8, 300}, {0x8100, 11}},                // customer 11: port 9
                    {{0x88a8, 300}},                              // the service VLAN: port 7
                    {{0x88a8, 300}, {0x8100, 12}},                // nobody's customer
                    {{0x8100, 300}, {0x8100, 10}},                // 802.1Q outside
                    {{0x88a8, 300}, {0x88a8, 10}},                // 802.1ad inside
                    {{0x88a8, 300}, {0x8100, 10}, {0x8100, 5}}},  // three tags
                   demux);
  r.expect_untagged_on({8, 9, 7});
  EXPECT_EQ(r.drops.load(DropReason::VLAN_UNKNOWN), 4u);
  EXPECT_EQ(r.drops.total(), 4u);
  for (size_t i = 0; i < r.kept.size(); ++i)
    EXPECT_EQ(bool(r.kept[i]->ol_flags & RTE_MBUF_F_RX_QINQ_STRIPPED), i != 2);
  EXPECT_EQ(r.kept[0]->vlan_tci, 0x4000 | 10) << "the customer tag's TCI, priority included";
  EXPECT_EQ(r.kept[0]->vlan_tci_outer, 300);
  EXPECT_EQ(r.kept[2]->vlan_tci, 300);
}

// A reload's claims and releases (DataPath::add_vlan_port, retire_vlan_port): a released
// VLAN's frames are vlan_unknown, a customer released leaves its service VLAN and the other
// customers as they were, and a VLAN claimed again is its port's again.
TEST(RxClassify, ReleasedVlansAreUnknownAndClaimedAgainAreTheirPortsAgain) {
  VlanDemux demux;
  demux.claim(RTE_ETHER_TYPE_VLAN, 100, 5);
  demux.claim(RTE_ETHER_TYPE_QINQ, 300, 7);
  demux.claim_inner(RTE_ETHER_TYPE_QINQ, 300, 10, 8);
  demux.claim_inner(RTE_ETHER_TYPE_QINQ, 300, 11, 9);
  const std::vector<std::vector<std::pair<uint16_t, uint16_t>>> frames = {
      {{0x8100, 100}},
      {{0x88a8, 300}},
      {{0x88a8, 300}, {0x8100, 10}},
      {{0x88a8, 300}, {0x8100, 11}}};
  demux.release(RTE_ETHER_TYPE_VLAN, 100);
  demux.release_inner(RTE_ETHER_TYPE_QINQ, 300, 10);
  {
    const DemuxRun r(frames, demux);
    r.expect_untagged_on({7, 9});
    EXPECT_EQ(r.drops.load(DropReason::VLAN_UNKNOWN), 2u);
  }
  demux.release(RTE_ETHER_TYPE_QINQ, 300);
  {
    const DemuxRun r(frames, demux);
    r.expect_untagged_on({9});
  }
  demux.claim(RTE_ETHER_TYPE_VLAN, 100, 5);
  demux.claim(RTE_ETHER_TYPE_QINQ, 300, 7);
  demux.claim_inner(RTE_ETHER_TYPE_QINQ, 300, 10, 8);
  const DemuxRun r(frames, demux);
  r.expect_untagged_on({5, 7, 8, 9});
  EXPECT_EQ(r.drops.total(), 0u);
}

// A parent that takes up to `room` packets a call and keeps what it took.
class TakingPort final : public Port {
 public:
  TakingPort() : Port("trunk", PortId{0}) { size_counters(1, 2); }
  std::string_view kind() const noexcept override { return "fake"; }
  uint16_t rx_queue_count() const noexcept override { return 1; }
  uint16_t tx_queue_count() const noexcept override { return 2; }
  uint16_t rx_burst(uint16_t, rte_mbuf**, uint16_t) noexcept override { return 0; }
  uint16_t tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override {
    const uint16_t took = std::min<uint16_t>(n, room);
    for (uint16_t i = 0; i < took; ++i)
      sent.emplace_back(q, pkts[i]);
    return took;
  }
  LinkState link_state() const noexcept override { return LinkState::Up; }
  Result<void> start() override { return {}; }
  void stop() noexcept override {}
  uint16_t room = 64;
  std::vector<std::pair<uint16_t, rte_mbuf*>> sent;
};

// What leaves through a VLAN port leaves its parent's queue of the same index tagged; what the
// parent refuses comes back as the caller gave it; a clone, whose bytes are another packet's
// too, is tagged in a copy.
TEST(VlanPortTx, TagsOnTheParentsQueueAndGivesBackRefusedPacketsUntagged) {
  PacketPool& p = pool();
  TakingPort trunk;
  VlanPort office("office", PortId{1}, trunk, VlanOptions{100, "trunk0.100", "trunk0", {}});
  EXPECT_EQ(office.tx_queue_count(), 2);
  EXPECT_EQ(office.rx_queue_count(), 0);
  const Bytes f = FrameBuilder().ipv4(ip4(10, 2, 0, 2), ip4(10, 1, 0, 2), 17).udp(9, 7).build();
  const auto packet = [&] {
    rte_mbuf* m = rte_pktmbuf_alloc(p.mempool());
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
    m->l2_len = 14;
    reset_meta(m);
    return m;
  };
  rte_mbuf* pkts[4] = {packet(), packet(), packet(), packet()};
  rte_mbuf* original = pkts[3];
  rte_mbuf* clone = rte_pktmbuf_clone(original, p.mempool());
  ASSERT_NE(clone, nullptr);
  pkts[3] = clone;
  trunk.room = 2;
  EXPECT_EQ(office.tx_burst(1, pkts, 4), 2);
  ASSERT_EQ(trunk.sent.size(), 2u);
  for (const auto& [q, m] : trunk.sent) {
    EXPECT_EQ(q, 1);
    ASSERT_EQ(m->pkt_len, f.size() + 4);
    const uint8_t* b = rte_pktmbuf_mtod(m, const uint8_t*);
    EXPECT_EQ(0, std::memcmp(b, f.data(), 12)) << "the addresses, then the tag";
    EXPECT_EQ(b[12] << 8 | b[13], 0x8100);
    EXPECT_EQ(b[14] << 8 | b[15], 100);
    EXPECT_EQ(0, std::memcmp(b + 16, f.data() + 12, f.size() - 12));
    EXPECT_EQ(m->l2_len, 18);
  }
  // The two refused: as they were given (the clone replaced by its tagged copy, untagged).
  for (int i = 2; i < 4; ++i) {
    ASSERT_EQ(pkts[i]->pkt_len, f.size());
    EXPECT_EQ(0, std::memcmp(rte_pktmbuf_mtod(pkts[i], const void*), f.data(), f.size()));
    EXPECT_EQ(pkts[i]->l2_len, 14);
  }
  EXPECT_NE(pkts[3], clone) << "the clone was copied, and freed";
  EXPECT_EQ(0, std::memcmp(rte_pktmbuf_mtod(original, const void*), f.data(), f.size()))
      << "the original of a clone untouched";
  const PortStatus st = office.status();
  ASSERT_EQ(st.queues.size(), 2u);
  EXPECT_EQ(st.queues[1].tx_packets, 2u);
  EXPECT_EQ(st.queues[1].tx_bytes, 2 * (f.size() + 4));
  EXPECT_EQ(st.queues[1].tx_refused, 2u);
  EXPECT_EQ(st.queues[1].tx_copies, 1u);
  for (const auto& [q, m] : trunk.sent)
    rte_pktmbuf_free(m);
  rte_pktmbuf_free(pkts[2]);
  rte_pktmbuf_free(pkts[3]);
  rte_pktmbuf_free(original);
}

// A packet the neighbour stage tagged already (kMetaFlagTagged) leaves as it is, and, refused,
// comes back still tagged; the port tags only the others.
TEST(VlanPortTx, APacketTaggedAlreadyLeavesWithItsOneTag) {
  PacketPool& p = pool();
  TakingPort trunk;
  VlanPort lab("lab", PortId{2}, trunk, VlanOptions{200, "", "", {}});
  const Bytes f = FrameBuilder().ipv4(ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 17).udp(7, 9).build();
  rte_mbuf* pkts[2];
  for (rte_mbuf*& m : pkts) {
    m = rte_pktmbuf_alloc(p.mempool());
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
    m->l2_len = 14;
    reset_meta(m);
    ASSERT_TRUE(vlan_push(m, 200));
    meta(m).flags |= kMetaFlagTagged;
  }
  trunk.room = 1;
  EXPECT_EQ(lab.tx_burst(0, pkts, 2), 1);
  for (rte_mbuf* m : {trunk.sent[0].second, pkts[1]}) {
    ASSERT_EQ(m->pkt_len, f.size() + 4) << "one tag, not two";
    const uint8_t* b = rte_pktmbuf_mtod(m, const uint8_t*);
    EXPECT_EQ(b[12] << 8 | b[13], 0x8100);
    EXPECT_EQ(b[14] << 8 | b[15], 200);
    EXPECT_EQ(b[16] << 8 | b[17], 0x0800);
  }
  rte_pktmbuf_free(trunk.sent[0].second);
  rte_pktmbuf_free(pkts[1]);
}

// A QinQ port: a VLAN port of a service VLAN port (802.1ad). What it sends leaves the link
// with the service tag outside and the customer tag inside, tagged by the two ports or all at
// once by the neighbour stage; what the link refuses comes back as the caller gave it.
TEST(VlanPortTx, AQinqPortsPacketsLeaveWithBothTags) {
  PacketPool& p = pool();
  TakingPort trunk;
  VlanPort service("svc", PortId{1}, trunk, VlanOptions{300, "", "", {}, RTE_ETHER_TYPE_QINQ});
  VlanPort customer("cust", PortId{2}, service, VlanOptions{10, "", "", {}});
  const Bytes f = FrameBuilder().ipv4(ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 17).udp(7, 9).build();
  rte_mbuf* pkts[3];
  for (rte_mbuf*& m : pkts) {
    m = rte_pktmbuf_alloc(p.mempool());
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
    m->l2_len = 14;
    reset_meta(m);
  }
  // The neighbour stage's way: both tags at once.
  ASSERT_TRUE(vlan_push(pkts[1], VlanTags{RTE_ETHER_TYPE_QINQ, 300, RTE_ETHER_TYPE_VLAN, 10}));
  meta(pkts[1]).flags |= kMetaFlagTagged;
  trunk.room = 2;
  EXPECT_EQ(customer.tx_burst(0, pkts, 3), 2);
  Bytes want(f.begin(), f.begin() + 12);  // the addresses, the two tags, the rest
  for (uint8_t byte : {0x88, 0xa8, 0x01, 0x2c, 0x81, 0x00, 0x00, 0x0a})
    want.push_back(byte);
  want.insert(want.end(), f.begin() + 12, f.end());
  ASSERT_EQ(trunk.sent.size(), 2u);
  for (const auto& [q, m] : trunk.sent) {
    EXPECT_EQ(Bytes(rte_pktmbuf_mtod(m, const uint8_t*),
                    rte_pktmbuf_mtod(m, const uint8_t*) + m->data_len),
              want);
    EXPECT_EQ(m->l2_len, 22);
  }
  EXPECT_EQ(pkts[2]->pkt_len, f.size()) << "refused: back untagged";
  EXPECT_EQ(0, std::memcmp(rte_pktmbuf_mtod(pkts[2], const void*), f.data(), f.size()));
  EXPECT_EQ(pkts[2]->l2_len, 14);
  EXPECT_EQ(customer.status().queues[0].tx_packets, 2u);
  for (const auto& [q, m] : trunk.sent)
    rte_pktmbuf_free(m);
  rte_pktmbuf_free(pkts[2]);
}

TEST(PortBase, StatusCountsQueuesAndNamesModes) {
  FakePort port;
  PortStatus s = port.status();
  EXPECT_EQ(s.name, "fake");
  EXPECT_EQ(s.queues.size(), 2u);
  EXPECT_EQ(s.queues[1].index, 1);
  EXPECT_EQ(s.link, LinkState::Up);
  EXPECT_EQ(to_string(WakeMode::Interrupt), "interrupt");
  EXPECT_EQ(to_string(QueueOwner::Dpdk), "dpdk");
  EXPECT_EQ(to_string(CopyMode::ZeroCopy), "zero-copy");
  rte_mbuf* m = nullptr;
  EXPECT_EQ(port.to_kernel(0, &m, 1), 0) << "no kernel path: nothing taken";
}

TEST(PortFactory, PortsAndPoolFromTheApplianceFile) {
  PacketPool& p = pool();
  auto cfg = config::load_config_text(
      "dpdk: {mbufs: 8192, mbuf_cache: 64}\n"
      "ports:\n"
      "  - {name: wan, type: afxdp, interface: vpnosuch9, frame_size: 4096}\n"
      "  - {name: lan, type: dpdk, devargs: net_ring7, queues: 2}\n"
      "steering: {malformed: pass, symmetric_hash: false}\n"
      "scheduler: {flow_id: software}\n",
      "t.yaml", config::StageTypes{});
  ASSERT_TRUE(cfg);
  PacketPoolOptions po = pool_options(*cfg);
  EXPECT_EQ(po.mbufs, 8192u);
  EXPECT_EQ(po.cache, 64u);
  EXPECT_EQ(po.frame_size, 4096u) << "the largest afxdp frame_size";
  // Queues served by DPDK's net_af_xdp need 4096-byte buffers for full-sized frames.
  auto hybrid = config::load_config_text(
      "ports:\n"
      "  - {name: wan, type: afxdp, interface: vpnosuch9}\n"
      "  - {name: lan, type: afxdp, interface: vpnosuch8, queues: [{queues: 0, owner: dpdk}]}\n",
      "h.yaml", config::StageTypes{});
  ASSERT_TRUE(hybrid);
  EXPECT_EQ(pool_options(*hybrid).frame_size, 4096u);
  auto own =
      config::load_config_text("ports:\n  - {name: wan, type: afxdp, interface: vpnosuch9}\n",
                               "o.yaml", config::StageTypes{});
  ASSERT_TRUE(own);
  EXPECT_EQ(pool_options(*own).frame_size, 2048u) << "vecflow's own sockets: 2048 is enough";
  PortEnvironment env = port_environment(*cfg);
  EXPECT_FALSE(env.drop_malformed);
  EXPECT_FALSE(env.symmetric_hash);
  EXPECT_EQ(env.flow_id, FlowIdSource::Software);
  env.pool = &p;
  auto wan = create_port(cfg->ports[0], PortId{0}, env);
  ASSERT_FALSE(wan);
  EXPECT_THAT(wan.error().message, testing::HasSubstr("port wan: interface 'vpnosuch9'"));
  auto lan = create_port(cfg->ports[1], PortId{1}, env);
  ASSERT_TRUE(lan) << lan.error().message;
  EXPECT_EQ((*lan)->kind(), "dpdk");
  EXPECT_EQ((*lan)->rx_queue_count(), 2);
  EXPECT_EQ((*lan)->name(), "lan");
}

}  // namespace
