// The malformed-traffic corpus on the user-space side: the committed files are what corpus.cc
// builds, they cover every case the reliability issue names and every reason the parser can
// give, and every frame replayed into mbufs as a DPDK port delivers them comes to the outcome
// MANIFEST names.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "core/flow.h"
#include "core/packet.h"
#include "core/parse.h"
#include "corpus.h"
#include "support/eal_env.h"

using namespace vecflow;
using namespace vecflow::test;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The first line where two texts differ, as "line N: 'a' vs 'b'", or "" when equal.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream ia(a), ib(b);
  std::string la, lb;
  for (int n = 1;; ++n) {
    bool ga = bool(std::getline(ia, la)), gb = bool(std::getline(ib, lb));
    if (!ga && !gb) return "";
    if (ga != gb || la != lb) return "line " + std::to_string(n) + ": '" + la + "' vs '" + lb + "'";
  }
}

constexpr const char* kRegenerate = "the committed corpus is stale: ninja -C build corpus-update";

std::vector<ManifestEntry> committed_manifest() {
  auto m = parse_manifest(read_file(fs::path(corpus_dir()) / "MANIFEST"));
  if (!m) ADD_FAILURE() << m.error().message;
  return m ? *m : std::vector<ManifestEntry>{};
}

}  // namespace

TEST(Corpus, CommittedFilesEqualTheGenerator) {
  auto cases = corpus_cases();
  fs::path dir = corpus_dir();
  EXPECT_EQ(first_difference(read_file(dir / "MANIFEST"), manifest_text(cases)), "")
      << "MANIFEST: " << kRegenerate;

  fs::path tmp = fs::temp_directory_path() / ("vrl-corpus-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  std::set<std::string> expected;
  for (const auto& c : cases) {
    std::string file = c.name + ".pcap";
    expected.insert(file);
    ASSERT_TRUE(write_pcap((tmp / file).string(), c.frames));
    EXPECT_EQ(read_file(dir / file), read_file(tmp / file)) << file << ": " << kRegenerate;
  }
  fs::remove_all(tmp);
  std::set<std::string> committed;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".pcap") committed.insert(e.path().filename().string());
  EXPECT_EQ(committed, expected) << kRegenerate;

  // The frame fuzz targets' seeds are the same frames, one file each.
  fs::path seeds = fs::path(VECFLOW_SOURCE_DIR) / "tests/fuzz/corpus/frame";
  size_t seed_files = 0;
  for (const auto& c : cases) {
    for (size_t i = 0; i < c.frames.size(); ++i, ++seed_files) {
      std::string name = c.name + "-" + std::to_string(i);
      std::string bytes = read_file(seeds / name);
      EXPECT_EQ(bytes, std::string(c.frames[i].begin(), c.frames[i].end()))
          << "tests/fuzz/corpus/frame/" << name << ": " << kRegenerate;
    }
  }
  // Besides the generated seeds, the directory keeps the inputs fuzzing found (regress-*).
  size_t generated = 0;
  for (const auto& e : fs::directory_iterator(seeds))
    generated += e.path().filename().string().rfind("regress-", 0) != 0;
  EXPECT_EQ(generated, seed_files) << kRegenerate;
}

// Every case the issue lists has its file (the names are the documentation's too).
TEST(Corpus, CoversTheIssueList) {
  const std::vector<std::string> required = {
      "eth_shorter_than_header",         // Ethernet < 14 B
      "vlan_cut_after_tag",              // VLAN cut after the tag
      "vlan_cut_in_tag",                 //
      "vlan_1_tag",                      // 1 tag
      "vlan_2_tags_qinq",                // 2 (QinQ)
      "vlan_3_tags",                     // 3
      "vlan_limit_plus_1",               // limit + 1
      "ipv4_shorter_than_header",        // IPv4 < 20 B
      "ipv4_ihl_below_5",                // IHL < 5
      "ipv4_ihl_beyond_frame",           // IHL beyond the frame
      "ipv4_total_length_above_frame",   // total length above the frame
      "ipv4_total_length_below_frame",   // ... and below
      "ipv4_bad_checksum",               // bad checksum
      "ipv4_options",                    // options
      "ipv4_fragment_first",             // first, middle, last, overlapping fragments
      "ipv4_fragment_first_tiny",        // and a tiny first fragment, IPv4 and IPv6
      "ipv4_fragment_middle",            //
      "ipv4_fragment_last",              //
      "ipv4_fragment_overlapping",       //
      "ipv6_fragment_first",             //
      "ipv6_fragment_first_tiny",        //
      "ipv6_fragment_middle",            //
      "ipv6_fragment_last",              //
      "ipv6_fragment_overlapping",       //
      "ipv6_truncated",                  // IPv6 truncated
      "ipv6_shorter_than_header",        //
      "ipv6_ext_length_beyond_frame",    // extension header length past the frame
      "ipv6_ext_chain_beyond_bound",     // chains longer than the bound
      "tcp_data_offset_below_5",         // TCP data offset < 5
      "tcp_data_offset_beyond_segment",  // ... and past the segment
      "udp_length_zero",                 // UDP length 0
      "udp_length_beyond_payload",       // ... and past the payload
      "jumbo_9000",                      // 9000 B jumbo
      "above_mtu",                       // above the MTU
      "runts",                           // runts
      "padded",                          // padded frames
  };
  std::set<std::string> files;
  for (const auto& e : committed_manifest())
    files.insert(e.file);
  for (const auto& name : required)
    EXPECT_TRUE(files.count(name + ".pcap")) << name;
}

// Every reason the shared parser can return has at least one frame that produces it.
TEST(Corpus, CoversEveryParserDropReason) {
  std::set<DropReason> seen;
  for (const auto& e : committed_manifest()) {
    if (e.user.kind == Outcome::Drop) seen.insert(e.user.reason);
    if (e.xdp.kind == Outcome::Drop) seen.insert(e.xdp.reason);
  }
  // The parser's reasons are the first group of drop_reasons.h up to ICMP_TRUNCATED, and those
  // appended to that group later (FRAME_TOO_BIG, in the group, is a device's: a frame its
  // buffers cannot hold).
  for (auto r :
       {DropReason::L2_TRUNCATED, DropReason::VLAN_TRUNCATED, DropReason::VLAN_TOO_DEEP,
        DropReason::ARP_TRUNCATED, DropReason::IPV4_TRUNCATED, DropReason::IPV4_BAD_VERSION,
        DropReason::IPV4_BAD_IHL, DropReason::IPV4_BAD_LEN, DropReason::IPV6_TRUNCATED,
        DropReason::IPV6_BAD_LEN, DropReason::IPV6_EXT_TRUNCATED, DropReason::IPV6_EXT_TOO_LONG,
        DropReason::TCP_TRUNCATED, DropReason::TCP_BAD_DOFF, DropReason::UDP_TRUNCATED,
        DropReason::UDP_BAD_LEN, DropReason::ICMP_TRUNCATED, DropReason::IPV6_BAD_VERSION,
        DropReason::SCTP_TRUNCATED}) {
    EXPECT_TRUE(seen.count(r)) << drop_reason_name(r);
  }
}

// The user-space receive path on every committed frame: parse_packet() on the mbuf (chained
// past 2 KiB like a port's) must give MANIFEST's user outcome, and for frames in one buffer
// the same answer as the parser on the bytes.
TEST(Corpus, UserSpaceReplay) {
  VECFLOW_REQUIRE_EAL();
  rte_mempool* pool =
      rte_pktmbuf_pool_create("vrl_corpus", 256, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr);
  size_t frames = 0;
  std::map<std::string, size_t> by_outcome;
  for (const auto& e : committed_manifest()) {
    SCOPED_TRACE(e.file);
    auto pcap = read_pcap(corpus_dir() + "/" + e.file);
    ASSERT_TRUE(pcap) << pcap.error().message;
    EXPECT_EQ(pcap->size(), e.frames);
    ASSERT_NE(e.user.kind, Outcome::Refused) << "user space takes every frame a port delivers";
    for (size_t i = 0; i < pcap->size(); ++i) {
      SCOPED_TRACE("frame " + std::to_string(i));
      const Bytes& f = (*pcap)[i];
      rte_mbuf* m = to_mbuf(pool, f);
      ASSERT_NE(m, nullptr);
      auto got = parse_packet(m, true);
      Outcome o = got ? Outcome::drop(*got) : Outcome::accept();
      EXPECT_EQ(to_string(o), to_string(e.user));
      EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_RX_RSS_HASH) << "every packet gets a flow id";
      if (m->nb_segs == 1) {
        ParsedFrame p;
        EXPECT_EQ(parse_frame(f, p), got);
        if (!got) {
          EXPECT_EQ(m->l2_len, p.l2_len);
          EXPECT_EQ(m->l3_len, p.l3_len);
          EXPECT_EQ(m->packet_type, packet_type_of(p));
          EXPECT_EQ(m->hash.rss, flow_hash(p.key, true));
          EXPECT_LE(size_t(p.l2_len) + p.l3_len + p.l4_len, f.size());
        }
      }
      rte_pktmbuf_free(m);
      ++frames;
      ++by_outcome[to_string(o)];
    }
  }
  EXPECT_EQ(rte_mempool_in_use_count(pool), 0u);
  rte_mempool_free(pool);
  std::string summary;
  for (auto& [o, n] : by_outcome)
    summary += " " + o + "=" + std::to_string(n);
  RecordProperty("frames", int(frames));
  std::printf("user-space replay: %zu frames:%s\n", frames, summary.c_str());
  EXPECT_GE(frames, 100u);
}
