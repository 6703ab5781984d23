// xsk_fwd: the raw AF_XDP forwarding ceiling of the benchmark suite (tools/bench/run.sh).
//
//   xsk_fwd --in wan0 --out lan0 [--seconds S]
//   xsk_fwd --in wan0 --out lan0 --in-peer MAC --out-peer MAC [--seconds S]
//
// Every frame arriving on queue 0 of IN goes out of OUT untouched: libxdp's default program
// redirects IN's frames to a socket, a second socket on OUT shares its UMEM, and the loop only
// moves descriptors (rx -> OUT's tx, OUT's completions -> IN's fill ring). No mbuf, no parse,
// no MAC rewrite: what any AF_XDP forwarder on this path can reach at most, the reference the
// suite sets vecflow's user-space path against. port_bench's raw socket measures the same
// ceiling as a reflector on one interface; the suite needs it between two interfaces, on the
// same topology as the other end-to-end rows.
//
// With --in-peer and --out-peer it forwards both ways, as a router must for a ping to cross
// it: each socket also receives (libxdp's program on both interfaces), and every frame leaves
// with the Ethernet destination of the peer on its egress side and the source of the egress
// interface itself (/sys/class/net/DEV/address); it answers no ARP, so the hosts on either
// side need a static neighbour entry for their gateway. Frames received on IN go out of OUT
// and come back to IN's fill ring through OUT's completions, and the reverse: each direction
// keeps its half of the UMEM. The benchmark suite's latency part measures its ping round trip,
// the floor of any AF_XDP forwarder's (it busy-polls, as without the flags).
//
// Prints "xsk_fwd: forwarding IN -> OUT" (both ways: "IN <-> OUT") on stderr when ready, and on
// exit (SIGINT/SIGTERM or --seconds) one JSON line on stdout: {"rx":N,"tx":N,"dropped":N}, the
// sums of both directions, which both ways also come per direction ("in_out", "out_in").
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <xdp/xsk.h>
#include <CLI/CLI.hpp>

namespace {

// UMEM geometry: 2048-byte frames hold any standard-MTU frame (the veth copy mode needs no
// headroom). Rx and tx rings of 2048 ride out a scheduling hiccup; twice as many frames cover
// both, and a fill ring that holds every frame means a refill never comes up short.
constexpr uint32_t kFrameSize = 2048;
constexpr uint32_t kRing = 2048;
constexpr uint32_t kFrames = 2 * kRing;
// Descriptors moved per loop: the kernel's own copy-mode batch is 64.
constexpr uint32_t kBatch = 64;
// sendto() calls per transmit kick: 64 frames per 32-frame call, with slack.
constexpr int kMaxKicks = 4;

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int fail(const char* what, int err) {
  std::fprintf(stderr, "xsk_fwd: %s: %s\n", what, std::strerror(err < 0 ? -err : err));
  return 2;
}

using Mac = std::array<uint8_t, 6>;

std::optional<Mac> parse_mac(const std::string& text) {
  Mac m;
  char tail;
  if (std::sscanf(text.c_str(), "%2hhx:%2hhx:%2hhx:%2hhx:%2hhx:%2hhx%c", &m[0], &m[1], &m[2], &m[3],
                  &m[4], &m[5], &tail) != 6)
    return std::nullopt;
  return m;
}

std::optional<Mac> interface_mac(const std::string& dev) {
  std::ifstream f("/sys/class/net/" + dev + "/address");
  std::string text;
  f >> text;
  return parse_mac(text);
}

// One way through the box: frames taken from `rx` go out on `tx`; the frames `tx` has sent
// come back on `comp` and return to `fill`, the fill ring of the socket `rx` belongs to.
struct Direction {
  xsk_ring_cons* rx;
  xsk_ring_prod* fill;
  xsk_ring_prod* tx;
  xsk_ring_cons* comp;
  int rx_fd;
  int tx_fd;
  // Both ways only: the peer's MAC, then the egress interface's own, written over each frame's
  // first 12 bytes (destination, source).
  std::optional<std::array<uint8_t, 12>> macs;
  // Busy-polling: a wake-up of the rx socket, when one is asked for, waits this long (ms).
  int wakeup_wait_ms;
  uint64_t rx_count = 0, tx_count = 0, dropped = 0;
};

// Owns the UMEM area, the two sockets and the UMEM; frees them in reverse order.
struct Forwarder {
  void* area = MAP_FAILED;
  size_t area_size = 0;
  xsk_umem* umem = nullptr;
  xsk_socket* in = nullptr;
  xsk_socket* out = nullptr;
  xsk_ring_prod in_fill{}, in_tx{}, out_fill{}, out_tx{};
  xsk_ring_cons in_comp{}, in_rx{}, out_comp{}, out_rx{};

  ~Forwarder() {
    if (out) xsk_socket__delete(out);
    if (in) xsk_socket__delete(in);
    if (umem) xsk_umem__delete(umem);
    if (area != MAP_FAILED) munmap(area, area_size);
  }

  static void refill(xsk_ring_prod* fill, const uint64_t* addrs, uint32_t n) {
    uint32_t idx = 0;
    // The fill ring holds every frame of its direction, so reserve cannot come up short.
    xsk_ring_prod__reserve(fill, n, &idx);
    for (uint32_t i = 0; i < n; ++i)
      *xsk_ring_prod__fill_addr(fill, idx + i) = addrs[i];
    xsk_ring_prod__submit(fill, n);
  }

  void step(Direction& d) {
    uint64_t addrs[kBatch];
    uint32_t idx = 0;
    uint32_t c = xsk_ring_cons__peek(d.comp, kBatch, &idx);
    for (uint32_t i = 0; i < c; ++i)
      addrs[i] = *xsk_ring_cons__comp_addr(d.comp, idx + i);
    if (c) {
      xsk_ring_cons__release(d.comp, c);
      refill(d.fill, addrs, c);
    }
    uint32_t rx_idx = 0;
    uint32_t n = xsk_ring_cons__peek(d.rx, kBatch, &rx_idx);
    if (n == 0) {
      if (xsk_ring_prod__needs_wakeup(d.fill)) {
        pollfd p{d.rx_fd, POLLIN, 0};
        poll(&p, 1, d.wakeup_wait_ms);
      }
      return;
    }
    d.rx_count += n;
    uint32_t tx_idx = 0;
    uint32_t room = xsk_prod_nb_free(d.tx, n);
    if (room < n) {
      kick(d.tx_fd);
      room = xsk_prod_nb_free(d.tx, n);
    }
    uint32_t sent = std::min(n, room);
    if (sent) xsk_ring_prod__reserve(d.tx, sent, &tx_idx);
    for (uint32_t i = 0; i < sent; ++i) {
      const xdp_desc* in = xsk_ring_cons__rx_desc(d.rx, rx_idx + i);
      if (d.macs && in->len >= d.macs->size())
        std::memcpy(xsk_umem__get_data(area, in->addr), d.macs->data(), d.macs->size());
      *xsk_ring_prod__tx_desc(d.tx, tx_idx + i) = *in;
    }
    // No room on the egress side: the frames go back to the fill ring, counted as dropped.
    for (uint32_t i = sent; i < n; ++i)
      addrs[i - sent] = xsk_ring_cons__rx_desc(d.rx, rx_idx + i)->addr;
    xsk_ring_cons__release(d.rx, n);
    if (n > sent) refill(d.fill, addrs, n - sent);
    d.dropped += n - sent;
    if (sent) {
      xsk_ring_prod__submit(d.tx, sent);
      d.tx_count += sent;
    }
    if (xsk_ring_prod__needs_wakeup(d.tx)) kick(d.tx_fd);
  }

  // Copy mode transmits only inside sendto(), at most 32 frames per call (the kernel's
  // TX_BATCH_SIZE), answering EAGAIN while more wait: call again until the ring is drained
  // or the kernel is busy for another reason.
  static void kick(int fd) {
    for (int k = 0; k < kMaxKicks; ++k) {
      if (sendto(fd, nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) return;
      if (errno != EAGAIN) return;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xsk_fwd: raw AF_XDP forwarding ceiling (descriptors only)"};
  std::string in_dev, out_dev, in_peer_text, out_peer_text;
  double seconds = 0;
  app.add_option("--in", in_dev, "Interface to receive on (queue 0)")->required();
  app.add_option("--out", out_dev, "Interface to transmit on (queue 0)")->required();
  auto* in_peer_opt =
      app.add_option("--in-peer", in_peer_text,
                     "Both ways: the MAC of the host behind IN (destination of what leaves on IN)");
  auto* out_peer_opt = app.add_option(
      "--out-peer", out_peer_text,
      "Both ways: the MAC of the host behind OUT (destination of what leaves on OUT)");
  in_peer_opt->needs(out_peer_opt);
  out_peer_opt->needs(in_peer_opt);
  app.add_option("--seconds", seconds, "Stop after this long (default: until signalled)");
  CLI11_PARSE(app, argc, argv);
  const bool both = !in_peer_text.empty();
  std::array<uint8_t, 12> to_out{}, to_in{};
  if (both) {
    auto in_peer = parse_mac(in_peer_text), out_peer = parse_mac(out_peer_text);
    if (!in_peer || !out_peer) {
      std::fprintf(stderr, "xsk_fwd: --in-peer and --out-peer must be MAC addresses\n");
      return 2;
    }
    auto in_mac = interface_mac(in_dev), out_mac = interface_mac(out_dev);
    if (!in_mac || !out_mac) {
      std::fprintf(stderr, "xsk_fwd: cannot read the MAC address of %s or %s\n", in_dev.c_str(),
                   out_dev.c_str());
      return 2;
    }
    std::copy(out_peer->begin(), out_peer->end(), to_out.begin());
    std::copy(out_mac->begin(), out_mac->end(), to_out.begin() + 6);
    std::copy(in_peer->begin(), in_peer->end(), to_in.begin());
    std::copy(in_mac->begin(), in_mac->end(), to_in.begin() + 6);
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Both ways: twice the frames, each direction's half in the fill ring of its rx socket.
  const uint32_t frames = both ? 2 * kFrames : kFrames;
  Forwarder f;
  f.area_size = size_t{frames} * kFrameSize;
  f.area = mmap(nullptr, f.area_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (f.area == MAP_FAILED) return fail("mmap", errno);
  xsk_umem_config uc{kFrames, kRing, kFrameSize, 0, 0};
  if (int rc = xsk_umem__create(&f.umem, f.area, f.area_size, &f.in_fill, &f.in_comp, &uc))
    return fail("UMEM", rc);
  xsk_socket_config sc{};
  sc.rx_size = kRing;
  sc.tx_size = kRing;
  sc.bind_flags = XDP_COPY | XDP_USE_NEED_WAKEUP;
  // IN: libxdp loads its default program, which redirects every frame of the queue here.
  if (int rc = xsk_socket__create(&f.in, in_dev.c_str(), 0, f.umem, &f.in_rx,
                                  both ? &f.in_tx : nullptr, &sc))
    return fail(("socket on " + in_dev).c_str(), rc);
  // OUT: transmit only, no program (nothing is received on it), unless both ways.
  if (!both) sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  if (int rc =
          xsk_socket__create_shared(&f.out, out_dev.c_str(), 0, f.umem, both ? &f.out_rx : nullptr,
                                    &f.out_tx, &f.out_fill, &f.out_comp, &sc))
    return fail(("socket on " + out_dev).c_str(), rc);
  // Every frame starts in a fill ring: IN's, and both ways the second half in OUT's.
  std::vector<uint64_t> addrs(frames);
  for (uint32_t i = 0; i < frames; ++i)
    addrs[i] = uint64_t{i} * kFrameSize;
  Forwarder::refill(&f.in_fill, addrs.data(), kFrames);
  if (both) Forwarder::refill(&f.out_fill, addrs.data() + kFrames, kFrames);

  const int in_fd = xsk_socket__fd(f.in), out_fd = xsk_socket__fd(f.out);
  // One way, a wake-up of IN may wait 1 ms, as it always did; both ways the loop must not
  // sleep on one side while frames wait on the other.
  Direction in_out{&f.in_rx,
                   &f.in_fill,
                   &f.out_tx,
                   &f.out_comp,
                   in_fd,
                   out_fd,
                   both ? std::optional(to_out) : std::nullopt,
                   both ? 0 : 1};
  Direction out_in{&f.out_rx, &f.out_fill, &f.in_tx, &f.in_comp, out_fd, in_fd, to_in, 0};

  std::fprintf(stderr, "xsk_fwd: forwarding %s %s %s\n", in_dev.c_str(), both ? "<->" : "->",
               out_dev.c_str());
  const uint64_t end = seconds > 0 ? now_ns() + static_cast<uint64_t>(seconds * 1e9) : UINT64_MAX;
  for (uint32_t i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    f.step(in_out);
    if (both) f.step(out_in);
    if ((i & 1023) == 0 && now_ns() >= end) break;
  }
  auto ull = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (!both) {
    std::printf("{\"rx\":%llu,\"tx\":%llu,\"dropped\":%llu}\n", ull(in_out.rx_count),
                ull(in_out.tx_count), ull(in_out.dropped));
    return 0;
  }
  std::printf(
      "{\"rx\":%llu,\"tx\":%llu,\"dropped\":%llu,\"in_out\":{\"rx\":%llu,\"tx\":%llu,"
      "\"dropped\":%llu},\"out_in\":{\"rx\":%llu,\"tx\":%llu,\"dropped\":%llu}}\n",
      ull(in_out.rx_count + out_in.rx_count), ull(in_out.tx_count + out_in.tx_count),
      ull(in_out.dropped + out_in.dropped), ull(in_out.rx_count), ull(in_out.tx_count),
      ull(in_out.dropped), ull(out_in.rx_count), ull(out_in.tx_count), ull(out_in.dropped));
  return 0;
}
