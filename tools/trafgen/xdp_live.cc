#include "xdp_live.h"

#include <ifaddrs.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include "trafgen_xdp_live.skel.h"

namespace vecflow::trafgen {
namespace {

constexpr size_t kEth = 14;
// Frames per batch of the kernel's loop: it transmits (flushes) after each batch. The program
// stamps the frames of a batch alike (xdp_live.bpf.c's BATCH).
constexpr uint32_t kBatch = 64;
// Unpaced runs: long enough to amortise a run's set-up (~15 us with the program held in the
// XDP dispatcher, ~25 ms without), short enough for --duration and signals (64k frames take
// 4-22 ms at 3-15 Mpps).
constexpr uint64_t kMaxRun = 1u << 16;
constexpr uint64_t kMaxRunUnheld = 1u << 20;

uint16_t word_at(const uint8_t* p) {
  uint16_t w;
  std::memcpy(&w, p, 2);
  return w;
}

// The one's complement sum of the words a checksum covers, less the words at `variable`: a
// checksum holds the complement of its sum, and one's complement arithmetic lets a word be
// taken out by adding its complement. Host word order, as the program adds its words.
uint32_t base_sum(const std::vector<uint8_t>& f, size_t csum_off,
                  std::initializer_list<size_t> variable) {
  uint32_t acc = static_cast<uint16_t>(~word_at(f.data() + csum_off));
  for (size_t off : variable)
    acc += static_cast<uint16_t>(~word_at(f.data() + off));
  while (acc >> 16)
    acc = (acc & 0xffff) + (acc >> 16);
  return acc;
}

uint64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// tx_dropped of an interface of this namespace (the link statistics getifaddrs() reads over
// netlink; 32 bits, so deltas are taken modulo 2^32), or 0.
uint32_t tx_dropped(const std::string& dev) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t n = 0;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_PACKET && i->ifa_data && dev == i->ifa_name)
      n = static_cast<const rtnl_link_stats*>(i->ifa_data)->tx_dropped;
  }
  freeifaddrs(list);
  return n;
}

}  // namespace

struct XdpLiveFrames::State {
  trafgen_xdp_live_bpf* skel = nullptr;
  bpf_link* loopback = nullptr;  // hold_in_dispatcher()
  std::vector<uint8_t> frame;    // the first flow's, sequence 0: the program rewrites the rest
  int ifindex = 0;
  xdp_md ctx{};  // as the frame arrives on `ifindex`; run() points the options at it
  ~State() {
    bpf_link__destroy(loopback);
    trafgen_xdp_live_bpf__destroy(skel);
  }
  // Options for one BPF_PROG_RUN of the program on `frame`, `repeat` times.
  bpf_test_run_opts run(uint32_t repeat) {
    ctx = {};
    ctx.data_end = static_cast<uint32_t>(frame.size());
    ctx.ingress_ifindex = static_cast<uint32_t>(ifindex);
    bpf_test_run_opts opts{};
    opts.sz = sizeof(opts);
    opts.data_in = frame.data();
    opts.data_size_in = static_cast<uint32_t>(frame.size());
    opts.ctx_in = &ctx;
    opts.ctx_size_in = sizeof(ctx);
    opts.repeat = repeat;
    return opts;
  }
};

XdpLiveFrames::XdpLiveFrames(std::unique_ptr<State> state) : state_(std::move(state)) {}
XdpLiveFrames::XdpLiveFrames(XdpLiveFrames&&) noexcept = default;
XdpLiveFrames& XdpLiveFrames::operator=(XdpLiveFrames&&) noexcept = default;
XdpLiveFrames::~XdpLiveFrames() = default;

std::expected<XdpLiveFrames, std::string> XdpLiveFrames::load(const FrameSpec& spec, uint32_t flows,
                                                              uint32_t first_flow, int ifindex) {
  auto state = std::make_unique<State>();
  state->ifindex = ifindex;
  FlowFrame ff = build_flow_frame(spec, first_flow);
  state->frame = ff.bytes;
  state->skel = trafgen_xdp_live_bpf__open();
  if (!state->skel) return std::unexpected(fmt::format("open: {}", std::strerror(errno)));
  auto* ro = state->skel->rodata;
  const bool v4 = spec.src_ip.version == 4;
  const size_t l4 = kEth + (v4 ? 20 : 40);
  const size_t addr = v4 ? kEth + 12 + 2 : kEth + 8 + 14;  // the source address's last word
  const size_t p = ff.payload_offset;
  ro->ifindex = static_cast<uint32_t>(ifindex);
  ro->flows = flows;
  ro->first_flow = first_flow;
  ro->src_port = spec.src_port;
  ro->sport_off = static_cast<uint16_t>(l4);
  ro->addr_off = static_cast<uint16_t>(addr);
  ro->payload_off = static_cast<uint16_t>(p);
  // The headers the program writes back into every frame: up to the payload header, in whole
  // 8-byte words (the payload header's 18 bytes follow, so the frame always holds them).
  const size_t headers = (p + 7) / 8 * 8;
  if (headers > sizeof(ro->headers) || headers > ff.bytes.size())
    return std::unexpected(fmt::format("headers of {} bytes: more than the program copies", p));
  std::memcpy(const_cast<__u64*>(ro->headers), ff.bytes.data(), headers);
  ro->headers_len = static_cast<uint32_t>(headers);
  // build_flow_frame() gave the first flow its own address bytes; the program adds the
  // spread of each flow to those of flow 0, as build_flow_frame() does.
  FlowFrame zero = build_flow_frame(spec, 0);
  ro->addr_hi = zero.bytes[addr];
  ro->addr_lo = zero.bytes[addr + 1];
  ro->l4_csum_off = static_cast<uint16_t>(ff.checksum_offset);
  if (ff.checksum_offset != 0) {
    ro->l4_base = base_sum(ff.bytes, ff.checksum_offset,
                           {addr, l4, p + 2, p + 4, p + 6, p + 8, p + 10, p + 12, p + 14, p + 16});
  }
  if (v4) {
    ro->ip_csum_off = kEth + 10;
    ro->ip_base = base_sum(ff.bytes, kEth + 10, {addr});
  }
  ro->realtime_offset = clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC);
  if (int err = trafgen_xdp_live_bpf__load(state->skel); err != 0) {
    return std::unexpected(
        fmt::format("loading the XDP program: {} (needs root)", std::strerror(-err)));
  }
  return XdpLiveFrames(std::move(state));
}

std::expected<void, std::string> XdpLiveFrames::hold_in_dispatcher() {
  int lo = static_cast<int>(if_nametoindex("lo"));
  if (lo == 0 || lo == state_->ifindex) return std::unexpected("no other loopback interface");
  state_->loopback = bpf_program__attach_xdp(state_->skel->progs.xdp_live, lo);
  if (state_->loopback == nullptr) {
    return std::unexpected(fmt::format("attaching to lo: {}", std::strerror(errno)));
  }
  return {};
}

std::expected<void, std::string> XdpLiveFrames::send(uint32_t frames) {
  bpf_test_run_opts opts = state_->run(frames);
  opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
  opts.batch_size = kBatch;
  state_->skel->bss->run_pos = 0;
  int err = bpf_prog_test_run_opts(bpf_program__fd(state_->skel->progs.xdp_live), &opts);
  if (err == 0) return {};
  if (err == -EINVAL) {
    return std::unexpected(
        fmt::format("BPF_PROG_RUN with live frames: {} (frames of {} B; a live frame must fit "
                    "one page with the kernel's head- and tailroom, 3408 B on Linux 6.18 x86-64)",
                    std::strerror(-err), state_->frame.size()));
  }
  return std::unexpected(fmt::format("BPF_PROG_RUN with live frames: {}", std::strerror(-err)));
}

std::expected<std::vector<uint8_t>, std::string> XdpLiveFrames::next_frame(
    std::span<const uint8_t> recycled) {
  std::vector<uint8_t> out(state_->frame.size());
  state_->skel->bss->run_pos = 0;  // a run of its own: the program reads the clock for it
  bpf_test_run_opts opts = state_->run(1);
  if (!recycled.empty()) {
    if (recycled.size() != state_->frame.size())
      return std::unexpected("a recycled frame has the frame's size");
    opts.data_in = recycled.data();
  }
  opts.data_out = out.data();
  opts.data_size_out = static_cast<uint32_t>(out.size());
  int err = bpf_prog_test_run_opts(bpf_program__fd(state_->skel->progs.xdp_live), &opts);
  if (err != 0) return std::unexpected(fmt::format("BPF_PROG_RUN: {}", std::strerror(-err)));
  if (opts.retval != XDP_TX) return std::unexpected(fmt::format("verdict {}", opts.retval));
  out.resize(opts.data_size_out);
  return out;
}

uint64_t XdpLiveFrames::frames_run() const {
  return state_->skel->bss->frames;
}

uint64_t XdpLiveFrames::stamp_offset_ns() const {
  return state_->skel->rodata->realtime_offset;
}

std::expected<XdpLiveResult, std::string> send_xdp_live(const FrameSpec& spec,
                                                        const XdpLiveOptions& opt,
                                                        const std::atomic<bool>& stop) {
  int ifindex = static_cast<int>(if_nametoindex(opt.dev.c_str()));
  if (ifindex == 0) return std::unexpected(fmt::format("interface {} does not exist", opt.dev));
  auto frames = XdpLiveFrames::load(spec, opt.flows, opt.first_flow, ifindex);
  if (!frames) return std::unexpected(frames.error());
  XdpLiveResult r;
  r.held = frames->hold_in_dispatcher().has_value();

  // Paced: as the AF_PACKET sender, sleep (timer slack 1 us) until the next frame is due, then
  // send every frame due by now and within the burst window in one run.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const uint32_t dropped_before = tx_dropped(opt.dev);
  const uint64_t start = clock_ns(CLOCK_MONOTONIC);
  const uint64_t end =
      opt.duration > 0 ? start + static_cast<uint64_t>(opt.duration * 1e9) : UINT64_MAX;
  const uint64_t limit = opt.count > 0 ? opt.count : UINT64_MAX;
  const auto burst_ns = static_cast<uint64_t>(std::max(0.0, opt.burst_us) * 1e3);
  // Frames due at or before `t` (frame k is due at start + k / rate).
  auto due_by = [&](uint64_t t) {
    return static_cast<uint64_t>(static_cast<double>(t - start) * opt.rate / 1e9) + 1;
  };
  while (!stop.load(std::memory_order_relaxed) && r.sent < limit) {
    uint64_t t = clock_ns(CLOCK_MONOTONIC);
    if (t >= end) break;
    uint64_t n = r.held ? kMaxRun : kMaxRunUnheld;
    if (end != UINT64_MAX && r.sent > 0) {
      // No further past the end than a batch, at the rate so far (the path behind the
      // interface, when it runs in this thread's softirq, may take far less than the engine).
      double per_ns = static_cast<double>(r.sent) / static_cast<double>(t - start);
      n = std::min(n, std::max<uint64_t>(
                          kBatch, static_cast<uint64_t>(per_ns * static_cast<double>(end - t))));
    }
    if (opt.rate > 0) {
      if (due_by(t) <= r.sent) {
        uint64_t next = start + static_cast<uint64_t>(static_cast<double>(r.sent) * 1e9 / opt.rate);
        timespec ts{static_cast<time_t>(next / 1'000'000'000ull),
                    static_cast<long>(next % 1'000'000'000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
        continue;
      }
      n = std::min(n, due_by(t + burst_ns) - r.sent);
    }
    n = std::min(n, limit - r.sent);
    auto sent = frames->send(static_cast<uint32_t>(n));
    r.sent = frames->frames_run();
    ++r.runs;
    if (!sent) {
      if (stop.load()) break;  // the signal interrupted the run (EINTR)
      return std::unexpected(sent.error());
    }
  }
  r.seconds = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - start) / 1e9;
  r.dev_tx_dropped = static_cast<uint32_t>(tx_dropped(opt.dev) - dropped_before);
  return r;
}

}  // namespace vecflow::trafgen
