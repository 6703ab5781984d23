// trafgen: vecflow's traffic generator and receiver, run inside a namespace of the lab.
//
//   trafgen send --dev eth0 --dst 198.51.100.2 --dst-mac 02:.. [--flows 1024] [--size 60]
//                [--proto udp|tcp] [--rate PPS [--burst-us US]] [--count N | --duration S]
//                [--engine af_packet|xdp-live] [--json]
//   trafgen recv --dev eth0 [--duration S] [--idle-exit MS] [--json]
//   trafgen pcap --out FILE --flows N [--size 60] [--dst 198.51.100.2] [--dst-mac 02:..]
//   trafgen replay --dev eth0 [--dst-mac 02:..] [--json] FILE.pcap...
//
// `replay` sends every frame of the files as it is (the malformed-traffic corpus, a capture),
// one send() each, and reports per file what was sent and what the kernel refused to send
// (frames shorter than an Ethernet header, frames above the MTU). --dst-mac writes the
// appliance's address into each frame long enough to hold one.
//
// `pcap` writes one frame per flow, flows in sequence, to a pcap file instead of sending: the
// input of a DPDK net_pcap vdev replaying it from memory (`rx_pcap=FILE,infinite_rx=1`), so
// with N flows each flow recurs every N frames. Same frames as `send` (sequence 0, no
// timestamp).
//
// The sender writes prebuilt frames into an AF_PACKET TX ring (TPACKET_V2) with
// PACKET_QDISC_BYPASS, one sendto() per batch: about 1 Mpps of 64 B frames on one vCPU here,
// which is what the kernel's veth path can take. xdp-trafgen and pktgen are not available on
// these machines (see MACHINE.md), hence this tool. Each payload carries the flow number and a
// per-flow sequence number; the receiver (TPACKET_V2 RX ring) counts per flow and reports loss
// (sequence gaps) and reordering (a sequence number below one already seen).
//
// One-way latency: the sender stamps every frame with CLOCK_REALTIME as it writes it into the
// TX ring, and the receiver subtracts that stamp from the kernel's receive timestamp of the
// frame (the tp_sec/tp_nsec of its ring slot, CLOCK_REALTIME too: sender and receiver are on
// one host), and reports p50/p99/p99.9/max from a fixed-size histogram (latency.h gives its
// precision). The kernel takes that timestamp when the frame reaches the receiver's tap, or
// earlier, where the receive path starts, while any socket of the host has asked for receive
// timestamps (ping does); either way after the whole path under test. What a stamp leaves out
// is the sender's own batch: a frame stamped as it is written waits for the rest of its batch
// to be written, then for the frames before it to be handed to the device in the same
// sendto(). At paced rates a batch holds only the frames due within --burst-us (one frame at
// 10 kpps and below with the default; 0: only those already due), so that wait stays short
// unless the sender falls behind its schedule (a batch then holds what is overdue, up to 64).
//
// `send --engine xdp-live` sends the same frames through the kernel's XDP live-frames mode
// instead (xdp_live.h): BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES runs a small XDP program
// (xdp_live.bpf.c) once per frame on a copy of one prebuilt frame and transmits each copy it
// returns XDP_TX for out of --dev, in batches of 64. The program writes what differs between
// frames (flow, source port and address, sequence number, stamp, checksums), so `recv` counts
// them unchanged. Out of a veth into an XDP_DROP program on its peer, 4.4-5.4 Mpps of 64 or 1500
// B frames against 0.31-0.43 for the TX ring (12-13x), into `trafgen recv` 0.58-0.79 against
// 0.18-0.26, on one vCPU of a loaded machine (tools/bench/log/2026-12-06-trafgen-xdp-live.md).
// Limits:
// - Frames of at most 3408 B (one page less the kernel's head- and tailroom, Linux 6.18 x86-64;
//   the kernel refuses larger ones). The interface must take XDP frames: a veth transmits them
//   only while its peer has NAPI on (GRO on, or an XDP program), and counts what it refused as
//   tx_dropped, which the result reports (`dev_tx_dropped`).
// - No back-pressure but the CPU's: the peer's receive work runs in this thread's softirq, as
//   for the TX ring, so an unpaced sender slows to what the path takes; with threaded NAPI on
//   the peer it does not, and the veth drops what the peer's ring (256 frames) cannot hold
//   (3.3 Mpps offered to a threaded trafgen recv: 0.16 received, the rest dev_tx_dropped).
// - Pacing (--rate): as the TX ring's batches, a run is due when its first frame is, and holds
//   the frames due by then and within --burst-us; its frames leave back to back at the engine's
//   full rate, then the sender sleeps. A run costs ~15 us plus its frames (trafgen keeps the
//   program in the kernel's XDP dispatcher by attaching it to lo, where it passes every frame;
//   if lo has an XDP program of its own, a run costs ~25 ms more and the result says
//   `held_in_dispatcher: false`). Wake-ups come ~20 us late here, so runs start every 80-150
//   us: bursts of ~8 frames at 100 kpps, ~100 at 1 Mpps, ~460 at 3 Mpps. The average rate is
//   exact within 0.2 % (an absolute schedule; 99 998 pps at --rate 100000, 998 705 at 1 M).
// - Stamps: CLOCK_MONOTONIC in the program plus the REALTIME-MONOTONIC offset read at start
//   (the receiver's clock; NTP slewing during a run moves it by parts per million), read once
//   per batch of 64 as its first frame is written (a read costs ~60 ns here, a quarter of the
//   rate if per frame). A batch leaves when its last frame is written, so a stamp is early by up
//   to that batch's writing time (~14 us for 64 frames at full rate; a paced run's batch holds
//   fewer). The latency benchmarks keep the TX ring, whose stamps are per frame.
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <pcap/pcap.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "frame.h"
#include "latency.h"
#include "xdp_live.h"

namespace {

using namespace vecflow;
using namespace vecflow::trafgen;

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void die(const std::string& what) {
  std::cerr << "trafgen: " << what << "\n";
  std::exit(2);
}

constexpr const char* kProtoHelp =
    "udp, tcp (data segments), syn (connection openings, a SYN flood) or rst (resets with "
    "sequence number 0, a RST flood: with --src-port and --dst-port they name one connection)";

void set_proto(FrameSpec& spec, const std::string& proto) {
  spec.tcp = proto != "udp";
  if (proto == "syn") spec.tcp_flags = 0x02;
  if (proto == "rst") spec.tcp_flags = 0x04;
}

int open_packet_socket(const std::string& dev, int& ifindex) {
  int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) die(fmt::format("AF_PACKET socket: {} (needs root)", std::strerror(errno)));
  ifindex = static_cast<int>(if_nametoindex(dev.c_str()));
  if (ifindex == 0) die(fmt::format("interface {} does not exist", dev));
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = ifindex;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) < 0) {
    die(fmt::format("bind to {}: {}", dev, std::strerror(errno)));
  }
  return fd;
}

MacAddress interface_mac(const std::string& dev) {
  std::ifstream f("/sys/class/net/" + dev + "/address");
  std::string s;
  f >> s;
  auto mac = parse_mac_address(s);
  if (!mac) die(fmt::format("cannot read the MAC address of {}", dev));
  return *mac;
}

std::optional<IpAddress> interface_ip(const std::string& dev, int version) {
  // `ip -o addr` is simpler than walking netlink here, and this runs once at start-up.
  std::string cmd =
      fmt::format("ip -o -{} addr show dev {} scope global 2>/dev/null", version, dev);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  char line[512];
  std::optional<IpAddress> out;
  if (fgets(line, sizeof(line), p)) {
    std::string s(line);
    auto pos = s.find(version == 4 ? "inet " : "inet6 ");
    if (pos != std::string::npos) {
      auto start = s.find(' ', pos) + 1;
      auto end = s.find('/', start);
      out = parse_ip_address(s.substr(start, end - start));
    }
  }
  pclose(p);
  return out;
}

struct SendOptions {
  std::string dev;
  std::string src;
  std::string dst;
  std::string dst_mac;
  uint32_t flows = 1;
  uint32_t first_flow = 0;  // flows first_flow .. first_flow + flows - 1
  size_t size = 60;
  std::string proto = "udp";
  uint16_t src_port = 1024;
  uint16_t dst_port = 9;
  double rate = 0;       // packets per second; 0 = as fast as possible
  double burst_us = 50;  // paced: frames due within this window share one sendto()
  uint64_t count = 0;
  double duration = 0;
  std::string engine = "af_packet";
  bool json = false;
};

// TPACKET_V2 ring geometry. 2048-byte slots hold any standard-MTU frame, 16 KiB slots a jumbo
// one (up to kMaxFrameSize, as `pcap`); 8 MiB of slots (4096 of 2 KiB) keep the kernel busy
// between our batches without costing much memory.
constexpr unsigned kTxRingBytes = 8u << 20;
constexpr unsigned kTxBlockSize = 1u << 16;
constexpr unsigned kMaxFrameSize = 9018;  // MTU 9000 with a VLAN tag
// Frames written per sendto(): amortises the syscall, small enough to keep pacing smooth.
constexpr unsigned kTxBatch = 64;

// The frames' common fields from the options (the interface's MAC, its address unless --src).
FrameSpec send_spec(const SendOptions& opt) {
  FrameSpec spec;
  auto dst = parse_ip_address(opt.dst);
  if (!dst) die(fmt::format("--dst {} is not an IP address", opt.dst));
  spec.dst_ip = *dst;
  std::optional<IpAddress> src =
      opt.src.empty() ? interface_ip(opt.dev, dst->version) : parse_ip_address(opt.src);
  if (!src || src->version != dst->version) die("give --src of the same IP version as --dst");
  spec.src_ip = *src;
  spec.src_mac = interface_mac(opt.dev);
  auto dmac = parse_mac_address(opt.dst_mac);
  if (!dmac) die("--dst-mac is required (the next hop's MAC, e.g. the appliance's wan0)");
  spec.dst_mac = *dmac;
  set_proto(spec, opt.proto);
  spec.src_port = opt.src_port;
  spec.dst_port = opt.dst_port;
  spec.frame_size = opt.size;
  if (opt.size < min_frame_size(spec) || opt.size > kMaxFrameSize) {
    die(fmt::format("--size must be {}..{}", min_frame_size(spec), kMaxFrameSize));
  }
  return spec;
}

struct SendResult {
  uint64_t sent = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  nlohmann::json engine;  // the engine's own figures, for --json
};

SendResult send_af_packet(const SendOptions& opt, const FrameSpec& spec) {
  const unsigned slot_size = opt.size + TPACKET2_HDRLEN <= 2048 ? 2048 : 16384;
  const unsigned slots = kTxRingBytes / slot_size;

  std::vector<FlowFrame> frames;
  frames.reserve(opt.flows);
  for (uint32_t f = 0; f < opt.flows; ++f)
    frames.push_back(build_flow_frame(spec, opt.first_flow + f));
  std::vector<uint32_t> seq(opt.flows, 0);

  int ifindex = 0;
  int fd = open_packet_socket(opt.dev, ifindex);
  int v = TPACKET_V2;
  if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0) die("PACKET_VERSION");
  int one = 1;
  setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
  tpacket_req req{kTxBlockSize, slots * slot_size / kTxBlockSize, slot_size, slots};
  if (setsockopt(fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof(req)) < 0) {
    die(fmt::format("PACKET_TX_RING: {}", std::strerror(errno)));
  }
  size_t ring_bytes = size_t{req.tp_block_size} * req.tp_block_nr;
  auto* ring =
      static_cast<uint8_t*>(mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (ring == MAP_FAILED) die("mmap of the TX ring failed");

  // A paced sender sleeps until its next frame is due, never spins: it shares its CPU with the
  // receiver and with the kernel's receive work (a veth's NAPI thread), and a spinning sender
  // starved that thread until veth's 256-frame ring overflowed (a third of a 32 kpps stream
  // lost, the rest delayed by milliseconds). A wake-up on these VMs comes ~20 us late (p99
  // 30-40 us, measured with a timer slack of 1 us; the default slack would add 50 us more),
  // so above ~50 kpps the frames due meanwhile go out together; each is stamped as it is
  // written, so a late wake-up is a gap in the pacing, not an error in a stamp.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  uint64_t start = now_ns();
  uint64_t end = opt.duration > 0 ? start + static_cast<uint64_t>(opt.duration * 1e9) : UINT64_MAX;
  uint64_t limit = opt.count > 0 ? opt.count : UINT64_MAX;
  double ns_per_pkt = opt.rate > 0 ? 1e9 / opt.rate : 0;
  auto burst_ns = static_cast<uint64_t>(std::max(0.0, opt.burst_us) * 1e3);
  auto due = [&](uint64_t n) {
    return start + static_cast<uint64_t>(static_cast<double>(n) * ns_per_pkt);
  };
  uint64_t sent = 0;
  uint64_t bytes = 0;
  unsigned slot = 0;
  uint32_t flow = 0;
  uint64_t ring_full_waits = 0;

  while (!g_stop.load(std::memory_order_relaxed) && sent < limit) {
    uint64_t t = now_ns();
    if (t >= end) break;
    if (ns_per_pkt > 0) {
      uint64_t next = due(sent);
      if (t < next) {
        timespec ts{static_cast<time_t>(next / 1'000'000'000ull),
                    static_cast<long>(next % 1'000'000'000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
        continue;
      }
    }
    unsigned batch = 0;
    while (batch < kTxBatch && sent < limit) {
      // Paced: the frames due by now plus those due within the burst window, no more, so that
      // a frame is not stamped long before the batch it belongs to is sent.
      if (ns_per_pkt > 0 && batch > 0 && due(sent) > t + burst_ns) break;
      auto* hdr = reinterpret_cast<tpacket2_hdr*>(ring + size_t{slot} * slot_size);
      if (hdr->tp_status != TP_STATUS_AVAILABLE) {
        ++ring_full_waits;
        break;
      }
      uint8_t* data = reinterpret_cast<uint8_t*>(hdr) + TPACKET2_HDRLEN - sizeof(sockaddr_ll);
      FlowFrame& ff = frames[flow];
      std::memcpy(data, ff.bytes.data(), ff.bytes.size());
      // Stamped last, as the frame is handed to the kernel: the receiver's clock.
      stamp(ff, data, seq[flow]++, realtime_ns());
      hdr->tp_len = static_cast<uint32_t>(ff.bytes.size());
      hdr->tp_status = TP_STATUS_SEND_REQUEST;
      slot = (slot + 1) % slots;
      flow = flow + 1 == opt.flows ? 0 : flow + 1;
      bytes += ff.bytes.size();
      ++sent;
      ++batch;
    }
    if (send(fd, nullptr, 0, batch == kTxBatch ? MSG_DONTWAIT : 0) < 0 && errno != EAGAIN &&
        errno != ENOBUFS) {
      die(fmt::format("send: {}", std::strerror(errno)));
    }
  }
  // Wait until the kernel has taken every frame we queued.
  for (int i = 0; i < 1000; ++i) {
    send(fd, nullptr, 0, 0);
    bool pending = false;
    for (unsigned s = 0; s < slots && !pending; ++s) {
      auto* hdr = reinterpret_cast<tpacket2_hdr*>(ring + size_t{s} * slot_size);
      pending = hdr->tp_status == TP_STATUS_SEND_REQUEST || hdr->tp_status == TP_STATUS_SENDING;
    }
    if (!pending) break;
    usleep(1000);
  }
  double secs = static_cast<double>(now_ns() - start) / 1e9;
  munmap(ring, ring_bytes);
  close(fd);
  return {sent, bytes, secs, {{"engine", "af_packet"}, {"ring_full_waits", ring_full_waits}}};
}

SendResult send_live_frames(const SendOptions& opt, const FrameSpec& spec) {
  XdpLiveOptions lo;
  lo.dev = opt.dev;
  lo.flows = opt.flows;
  lo.first_flow = opt.first_flow;
  lo.rate = opt.rate;
  lo.burst_us = opt.burst_us;
  lo.count = opt.count;
  lo.duration = opt.duration;
  auto r = send_xdp_live(spec, lo, g_stop);
  if (!r) die(r.error());
  if (!r->held) {
    std::cerr << "trafgen: the XDP program could not be attached to lo (another XDP program "
                 "there?): each run of the program costs ~25 ms more\n";
  }
  if (r->sent > 0 && r->dev_tx_dropped >= r->sent) {
    std::cerr << fmt::format(
        "trafgen: {} dropped every frame (a veth transmits XDP frames only while its peer has "
        "NAPI on: GRO on, or an XDP program attached)\n",
        opt.dev);
  }
  return {r->sent,
          r->sent * spec.frame_size,
          r->seconds,
          {{"engine", "xdp-live"},
           {"prog_runs", r->runs},
           {"held_in_dispatcher", r->held},
           {"dev_tx_dropped", r->dev_tx_dropped}}};
}

int run_send(const SendOptions& opt) {
  FrameSpec spec = send_spec(opt);
  SendResult r = opt.engine == "xdp-live" ? send_live_frames(opt, spec) : send_af_packet(opt, spec);
  double pps = static_cast<double>(r.sent) / r.seconds;
  double bps = static_cast<double>(r.bytes + 24 * r.sent) * 8 / r.seconds;  // + FCS, preamble, IFG
  if (opt.json) {
    nlohmann::json j = {
        {"sent", r.sent}, {"bytes", r.bytes},   {"seconds", r.seconds},  {"pps", pps},
        {"bps", bps},     {"flows", opt.flows}, {"frame_size", opt.size}};
    j.update(r.engine);
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format(
        "sent {} packets ({} flows, {} B) in {:.3f} s: {:.3f} Mpps, {:.3f} Gbit/s ({})\n", r.sent,
        opt.flows, opt.size, r.seconds, pps / 1e6, bps / 1e9, opt.engine);
  }
  return 0;
}

struct RecvOptions {
  std::string dev;
  double duration = 0;
  unsigned idle_exit_ms = 0;
  bool json = false;
};

struct FlowState {
  uint64_t received = 0;
  uint32_t next = 0;  // next expected sequence number
  uint32_t max_seen = 0;
  bool seen = false;
};

// TPACKET_V2 RX ring: one slot per frame, each handed back as soon as it is counted. 256-byte
// slots hold the header and the first ~190 bytes of a frame (all the receiver reads: the
// payload header sits right after the UDP or TCP header); 256k slots (64 MiB) absorb bursts
// of a quarter second at 1 Mpps. Not TPACKET_V3: on Linux 6.18 (its block-retire timer became
// an hrtimer) a V3 ring behind vecflowd dropped up to half of a 50 kpps flood although the
// receiver kept up (blocks of ~600 frames, the queue never frozen: tp_freeze_q_cnt 0), and
// vecflowd's own AF_XDP ring overflowed meanwhile; with this V2 ring neither loses a frame.
constexpr unsigned kRxSlotSize = 256;
constexpr unsigned kRxSlots = 1u << 18;
constexpr unsigned kRxBlockSize = 1u << 16;
// Flows beyond this are counted as foreign rather than growing the table without bound.
constexpr uint32_t kMaxFlows = 16u << 20;

int run_recv(const RecvOptions& opt) {
  int ifindex = 0;
  int fd = open_packet_socket(opt.dev, ifindex);
  int v = TPACKET_V2;
  if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0) die("PACKET_VERSION");
  tpacket_req req{kRxBlockSize, kRxSlots * kRxSlotSize / kRxBlockSize, kRxSlotSize, kRxSlots};
  if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
    die(fmt::format("PACKET_RX_RING: {}", std::strerror(errno)));
  }
  size_t ring_bytes = size_t{kRxSlotSize} * kRxSlots;
  auto* ring = static_cast<uint8_t*>(
      mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0));
  if (ring == MAP_FAILED) {
    ring =
        static_cast<uint8_t*>(mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  if (ring == MAP_FAILED) die("mmap of the RX ring failed");

  std::vector<FlowState> flows;
  LatencyHistogram latency;
  uint64_t clock_behind = 0;  // frames stamped after their receive timestamp (see latency.h)
  uint64_t received = 0, bytes = 0, foreign = 0, reordered = 0;
  uint64_t first_ns = 0, last_ns = 0;
  uint64_t start = now_ns();
  uint64_t end = opt.duration > 0 ? start + static_cast<uint64_t>(opt.duration * 1e9) : UINT64_MAX;
  unsigned slot = 0;
  // Ready for traffic: a test harness waits for this line before it starts sending.
  std::cerr << "trafgen: receiving on " << opt.dev << "\n";

  while (!g_stop.load(std::memory_order_relaxed)) {
    auto* ph = reinterpret_cast<tpacket2_hdr*>(ring + size_t{slot} * kRxSlotSize);
    if (!(__atomic_load_n(&ph->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {
      uint64_t t = now_ns();
      if (t >= end) break;
      if (opt.idle_exit_ms > 0 && received > 0 &&
          t - last_ns > uint64_t{opt.idle_exit_ms} * 1'000'000) {
        break;
      }
      pollfd pfd{fd, POLLIN | POLLERR, 0};
      poll(&pfd, 1, 10);
      continue;
    }
    const uint8_t* frame = reinterpret_cast<uint8_t*>(ph) + ph->tp_mac;
    // Outgoing frames of this host are seen too; count only what arrives.
    auto* sll = reinterpret_cast<sockaddr_ll*>(reinterpret_cast<uint8_t*>(ph) +
                                               TPACKET_ALIGN(sizeof(tpacket2_hdr)));
    PayloadHeader p;
    if (sll->sll_pkttype != PACKET_OUTGOING) {
      if (read_payload(frame, ph->tp_snaplen, p) && p.flow < kMaxFlows) {
        if (p.flow >= flows.size()) flows.resize(p.flow + 1);
        FlowState& fs = flows[p.flow];
        ++fs.received;
        if (!fs.seen || p.seq >= fs.next) {
          fs.next = p.seq + 1;
        } else {
          ++reordered;
        }
        const uint32_t seq = p.seq;  // std::max binds references; the header is packed
        fs.max_seen = fs.seen ? std::max(fs.max_seen, seq) : seq;
        fs.seen = true;
        if (auto ns = one_way_ns(ph->tp_sec, ph->tp_nsec, p.tx_ns)) {
          latency.add(*ns);
        } else {
          ++clock_behind;
        }
        ++received;
        bytes += ph->tp_len;
        last_ns = now_ns();
        if (first_ns == 0) first_ns = last_ns;
      } else {
        ++foreign;
      }
    }
    __atomic_store_n(&ph->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    slot = (slot + 1) % kRxSlots;
  }
  tpacket_stats st{};
  socklen_t len = sizeof(st);
  getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len);
  munmap(ring, ring_bytes);
  close(fd);

  uint64_t expected = 0;
  uint32_t nflows = 0;
  for (const auto& f : flows) {
    if (!f.seen) continue;
    ++nflows;
    expected += uint64_t{f.max_seen} + 1;  // sequence numbers start at 0
  }
  uint64_t lost = expected > received ? expected - received : 0;
  double secs = last_ns > first_ns ? static_cast<double>(last_ns - first_ns) / 1e9 : 0;
  double pps = secs > 0 ? static_cast<double>(received) / secs : 0;
  double bps = secs > 0 ? static_cast<double>(bytes + 24 * received) * 8 / secs : 0;
  if (opt.json) {
    nlohmann::json j = {{"received", received},
                        {"bytes", bytes},
                        {"flows", nflows},
                        {"lost", lost},
                        {"reordered", reordered},
                        {"foreign", foreign},
                        {"seconds", secs},
                        {"pps", pps},
                        {"bps", bps},
                        {"socket_drops", st.tp_drops},
                        {"latency",
                         {{"count", latency.count()},
                          {"clock_behind", clock_behind},
                          {"min_ns", latency.min()},
                          {"mean_ns", latency.mean()},
                          {"p50_ns", latency.quantile(0.5)},
                          {"p99_ns", latency.quantile(0.99)},
                          {"p999_ns", latency.quantile(0.999)},
                          {"max_ns", latency.max()}}}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format(
        "received {} packets in {} flows over {:.3f} s: {:.3f} Mpps, {:.3f} Gbit/s; lost {} "
        "(sequence gaps), reordered {}, foreign {}, socket drops {}\n",
        received, nflows, secs, pps / 1e6, bps / 1e9, lost, reordered, foreign, st.tp_drops);
    std::cout << fmt::format(
        "one-way latency of {} packets (receive timestamp - send stamp): p50 {:.1f} us, p99 "
        "{:.1f} us, p99.9 {:.1f} us, max {:.1f} us{}\n",
        latency.count(), latency.quantile(0.5) / 1e3, latency.quantile(0.99) / 1e3,
        latency.quantile(0.999) / 1e3, latency.max() / 1e3,
        clock_behind ? fmt::format("; {} stamped after their receive timestamp", clock_behind)
                     : "");
  }
  return 0;
}

struct PcapOptions {
  std::string out;
  uint32_t flows = 1;
  size_t size = 60;
  std::string src = "192.0.2.2";
  std::string dst = "198.51.100.2";
  std::string src_mac = "02:00:00:00:00:01";
  std::string dst_mac = "02:00:00:00:00:02";
  std::string proto = "udp";
  uint16_t src_port = 1024;
  uint16_t dst_port = 9;
  bool json = false;
};

// One frame per flow, flows 0..N-1 in order, written with libpcap's dumper.
int run_pcap(const PcapOptions& opt) {
  FrameSpec spec;
  auto src = parse_ip_address(opt.src);
  auto dst = parse_ip_address(opt.dst);
  if (!dst) die(fmt::format("--dst {} is not an IP address", opt.dst));
  if (!src || src->version != dst->version) die("give --src of the same IP version as --dst");
  auto smac = parse_mac_address(opt.src_mac);
  auto dmac = parse_mac_address(opt.dst_mac);
  if (!smac || !dmac) die("--src-mac and --dst-mac must be MAC addresses");
  spec.src_ip = *src;
  spec.dst_ip = *dst;
  spec.src_mac = *smac;
  spec.dst_mac = *dmac;
  set_proto(spec, opt.proto);
  spec.src_port = opt.src_port;
  spec.dst_port = opt.dst_port;
  spec.frame_size = opt.size;
  if (opt.size < min_frame_size(spec) || opt.size > kMaxFrameSize) {
    die(fmt::format("--size must be {}..{}", min_frame_size(spec), kMaxFrameSize));
  }
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  if (dead == nullptr) die("pcap_open_dead failed");
  pcap_dumper_t* d = pcap_dump_open(dead, opt.out.c_str());
  if (d == nullptr) die(fmt::format("{}: {}", opt.out, pcap_geterr(dead)));
  uint64_t bytes = 0;
  for (uint32_t f = 0; f < opt.flows; ++f) {
    FlowFrame ff = build_flow_frame(spec, f);
    pcap_pkthdr h{};
    h.ts.tv_sec = 0;
    h.ts.tv_usec = 0;
    h.caplen = h.len = static_cast<bpf_u_int32>(ff.bytes.size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, ff.bytes.data());
    bytes += ff.bytes.size();
  }
  bool ok = pcap_dump_flush(d) == 0;
  pcap_dump_close(d);
  pcap_close(dead);
  if (!ok) die(fmt::format("{}: write failed", opt.out));
  if (opt.json) {
    nlohmann::json j = {{"file", opt.out},
                        {"frames", opt.flows},
                        {"flows", opt.flows},
                        {"frame_size", spec.frame_size},
                        {"bytes", bytes}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format("wrote {} frames ({} flows, {} B) to {}\n", opt.flows, opt.flows,
                             spec.frame_size, opt.out);
  }
  return 0;
}

struct ReplayOptions {
  std::string dev;
  std::string dst_mac;
  std::vector<std::string> files;
  bool json = false;
};

int run_replay(const ReplayOptions& opt) {
  std::optional<MacAddress> dmac;
  if (!opt.dst_mac.empty()) {
    auto mac = parse_mac_address(opt.dst_mac);
    if (!mac) die("--dst-mac must be a MAC address");
    dmac = *mac;
  }
  int ifindex = 0;
  int fd = open_packet_socket(opt.dev, ifindex);
  nlohmann::json files = nlohmann::json::array();
  uint64_t total_sent = 0, total_refused = 0;
  std::vector<unsigned char> frame;
  for (const auto& path : opt.files) {
    char err[PCAP_ERRBUF_SIZE];
    pcap_t* in = pcap_open_offline(path.c_str(), err);
    if (in == nullptr) die(fmt::format("{}: {}", path, err));
    uint64_t frames = 0, sent = 0;
    std::map<std::string, uint64_t> refused;  // by the error send() gave
    pcap_pkthdr* h = nullptr;
    const u_char* data = nullptr;
    while (!g_stop.load() && pcap_next_ex(in, &h, &data) == 1) {
      ++frames;
      frame.assign(data, data + h->caplen);
      if (dmac && frame.size() >= dmac->bytes.size())
        std::memcpy(frame.data(), dmac->bytes.data(), dmac->bytes.size());
      if (send(fd, frame.data(), frame.size(), 0) == static_cast<ssize_t>(frame.size())) {
        ++sent;
      } else {
        ++refused[std::strerror(errno)];
      }
    }
    pcap_close(in);
    uint64_t nrefused = 0;
    for (const auto& [why, n] : refused)
      nrefused += n;
    total_sent += sent;
    total_refused += nrefused;
    if (!opt.json) {
      std::cout << fmt::format("{}: {} frames, {} sent", path, frames, sent);
      for (const auto& [why, n] : refused)
        std::cout << fmt::format(", {} refused ({})", n, why);
      std::cout << "\n";
    }
    files.push_back({{"file", path}, {"frames", frames}, {"sent", sent}, {"refused", refused}});
  }
  close(fd);
  if (opt.json) {
    nlohmann::json j = {
        {"files", std::move(files)}, {"sent", total_sent}, {"refused", total_refused}};
    std::cout << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "trafgen: vecflow's traffic generator (AF_PACKET TX ring or XDP live frames) and receiver"};
  app.require_subcommand(1);
  SendOptions so;
  auto* send_cmd = app.add_subcommand("send", "Send test traffic out of an interface");
  send_cmd->add_option("--dev", so.dev, "Interface to send on")->required();
  send_cmd->add_option("--dst", so.dst, "Destination IP (IPv4 or IPv6)")->required();
  send_cmd->add_option("--src", so.src, "Source IP (default: the interface's address)");
  send_cmd->add_option("--dst-mac", so.dst_mac, "Next hop MAC (the appliance's interface)")
      ->required();
  send_cmd->add_option("--flows", so.flows, "Number of flows (source ports, then addresses)")
      ->check(CLI::Range(1u, 16u << 20));
  send_cmd->add_option("--size", so.size, "Frame size in bytes without FCS (60 = 64 B frames)");
  send_cmd->add_option("--proto", so.proto, kProtoHelp)
      ->check(CLI::IsMember({"udp", "tcp", "syn", "rst"}));
  send_cmd->add_option("--src-port", so.src_port, "First source port");
  send_cmd
      ->add_option("--first-flow", so.first_flow,
                   "Number of the first flow (several senders to one receiver each take "
                   "their own flows)")
      ->check(CLI::Range(0u, (16u << 20) - 1));
  send_cmd->add_option("--dst-port", so.dst_port, "Destination port");
  send_cmd->add_option("--rate", so.rate, "Packets per second (default: as fast as possible)");
  send_cmd
      ->add_option("--burst-us", so.burst_us,
                   "With --rate: frames due within this many us go out in one sendto() (larger "
                   "costs less CPU; smaller keeps each frame's stamp closer to its send)")
      ->check(CLI::Range(0.0, 1e6));
  send_cmd->add_option("--count", so.count, "Packets to send");
  send_cmd
      ->add_option("--engine", so.engine,
                   "af_packet (a TPACKET_V2 TX ring, ~1 Mpps) or xdp-live (the kernel's XDP "
                   "live-frames mode, several Mpps; frames up to 3408 B)")
      ->check(CLI::IsMember({"af_packet", "xdp-live"}));
  send_cmd->add_option("--duration", so.duration, "Seconds to send");
  send_cmd->add_flag("--json", so.json, "Print the result as JSON");

  RecvOptions ro;
  auto* recv_cmd = app.add_subcommand("recv", "Count test traffic arriving on an interface");
  recv_cmd->add_option("--dev", ro.dev, "Interface to receive on")->required();
  recv_cmd->add_option("--duration", ro.duration, "Seconds to receive (default: until signalled)");
  recv_cmd->add_option("--idle-exit", ro.idle_exit_ms,
                       "Stop once no packet arrived for this many ms after the first");
  recv_cmd->add_flag("--json", ro.json, "Print the result as JSON");

  PcapOptions po;
  auto* pcap_cmd =
      app.add_subcommand("pcap", "Write one frame per flow, flows in sequence, to a pcap file");
  pcap_cmd->add_option("--out", po.out, "pcap file to write")->required();
  pcap_cmd->add_option("--flows", po.flows, "Number of flows (source ports, then addresses)")
      ->check(CLI::Range(1u, 16u << 20));
  pcap_cmd->add_option("--size", po.size, "Frame size in bytes without FCS (60 = 64 B frames)");
  pcap_cmd->add_option("--src", po.src, "Source IP (flows past 60000 vary its low bits)");
  pcap_cmd->add_option("--dst", po.dst, "Destination IP (IPv4 or IPv6)");
  pcap_cmd->add_option("--src-mac", po.src_mac, "Source MAC");
  pcap_cmd->add_option("--dst-mac", po.dst_mac, "Destination MAC");
  pcap_cmd->add_option("--proto", po.proto, kProtoHelp)
      ->check(CLI::IsMember({"udp", "tcp", "syn", "rst"}));
  pcap_cmd->add_option("--src-port", po.src_port, "First source port");
  pcap_cmd->add_option("--dst-port", po.dst_port, "Destination port");
  pcap_cmd->add_flag("--json", po.json, "Print what was written as JSON");
  ReplayOptions rp;
  auto* replay_cmd =
      app.add_subcommand("replay", "Send every frame of pcap files as it is, one by one");
  replay_cmd->add_option("--dev", rp.dev, "Interface to send on")->required();
  replay_cmd->add_option("--dst-mac", rp.dst_mac,
                         "Destination MAC written into every frame (default: as captured)");
  replay_cmd->add_flag("--json", rp.json, "Print what was sent and refused as JSON");
  replay_cmd->add_option("files", rp.files, "pcap files")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (*pcap_cmd) return run_pcap(po);
  if (*replay_cmd) return run_replay(rp);
  if (*send_cmd) {
    if (so.count == 0 && so.duration <= 0) so.duration = 1;
    return run_send(so);
  }
  return run_recv(ro);
}
