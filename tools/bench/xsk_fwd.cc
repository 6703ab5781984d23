// xsk_fwd: the raw AF_XDP forwarding ceiling of the benchmark suite (tools/bench/run.sh).
//
//   xsk_fwd --in wan0 --out lan0 [--seconds S]
//
// Every frame arriving on queue 0 of IN goes out of OUT untouched: libxdp's default program
// redirects IN's frames to a socket, a second socket on OUT shares its UMEM, and the loop only
// moves descriptors (rx -> OUT's tx, OUT's completions -> IN's fill ring). No mbuf, no parse,
// no MAC rewrite: what any AF_XDP forwarder on this path can reach at most, the reference the
// suite sets vecflow's user-space path against. port_bench's raw socket measures the same
// ceiling as a reflector on one interface; the suite needs it between two interfaces, on the
// same topology as the other end-to-end rows.
//
// Prints "xsk_fwd: forwarding IN -> OUT" on stderr when ready, and on exit (SIGINT/SIGTERM or
// --seconds) one JSON line on stdout: {"rx":N,"tx":N,"dropped":N}.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

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

// Owns the UMEM area, the two sockets and the UMEM; frees them in reverse order.
struct Forwarder {
  void* area = MAP_FAILED;
  xsk_umem* umem = nullptr;
  xsk_socket* in = nullptr;
  xsk_socket* out = nullptr;
  xsk_ring_prod in_fill{}, in_tx{}, out_fill{}, out_tx{};
  xsk_ring_cons in_comp{}, in_rx{}, out_comp{}, out_rx{};
  uint64_t rx = 0, tx = 0, dropped = 0;

  ~Forwarder() {
    if (out) xsk_socket__delete(out);
    if (in) xsk_socket__delete(in);
    if (umem) xsk_umem__delete(umem);
    if (area != MAP_FAILED) munmap(area, size_t{kFrames} * kFrameSize);
  }

  void refill(const uint64_t* addrs, uint32_t n) {
    uint32_t idx = 0;
    // The fill ring holds every frame of the UMEM, so reserve cannot come up short.
    xsk_ring_prod__reserve(&in_fill, n, &idx);
    for (uint32_t i = 0; i < n; ++i)
      *xsk_ring_prod__fill_addr(&in_fill, idx + i) = addrs[i];
    xsk_ring_prod__submit(&in_fill, n);
  }

  void step() {
    uint64_t addrs[kBatch];
    uint32_t idx = 0;
    uint32_t c = xsk_ring_cons__peek(&out_comp, kBatch, &idx);
    for (uint32_t i = 0; i < c; ++i)
      addrs[i] = *xsk_ring_cons__comp_addr(&out_comp, idx + i);
    if (c) {
      xsk_ring_cons__release(&out_comp, c);
      refill(addrs, c);
    }
    uint32_t rx_idx = 0;
    uint32_t n = xsk_ring_cons__peek(&in_rx, kBatch, &rx_idx);
    if (n == 0) {
      if (xsk_ring_prod__needs_wakeup(&in_fill)) {
        pollfd p{xsk_socket__fd(in), POLLIN, 0};
        poll(&p, 1, 1);
      }
      return;
    }
    rx += n;
    uint32_t tx_idx = 0;
    uint32_t room = xsk_prod_nb_free(&out_tx, n);
    if (room < n) {
      kick();
      room = xsk_prod_nb_free(&out_tx, n);
    }
    uint32_t sent = std::min(n, room);
    if (sent) xsk_ring_prod__reserve(&out_tx, sent, &tx_idx);
    for (uint32_t i = 0; i < sent; ++i)
      *xsk_ring_prod__tx_desc(&out_tx, tx_idx + i) = *xsk_ring_cons__rx_desc(&in_rx, rx_idx + i);
    // No room on OUT: the frames go back to IN's fill ring, counted as dropped.
    for (uint32_t i = sent; i < n; ++i)
      addrs[i - sent] = xsk_ring_cons__rx_desc(&in_rx, rx_idx + i)->addr;
    xsk_ring_cons__release(&in_rx, n);
    if (n > sent) refill(addrs, n - sent);
    dropped += n - sent;
    if (sent) {
      xsk_ring_prod__submit(&out_tx, sent);
      tx += sent;
    }
    if (xsk_ring_prod__needs_wakeup(&out_tx)) kick();
  }

  // Copy mode transmits only inside sendto(), at most 32 frames per call (the kernel's
  // TX_BATCH_SIZE), answering EAGAIN while more wait: call again until the ring is drained
  // or the kernel is busy for another reason.
  void kick() {
    for (int k = 0; k < kMaxKicks; ++k) {
      if (sendto(xsk_socket__fd(out), nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) return;
      if (errno != EAGAIN) return;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xsk_fwd: raw AF_XDP forwarding ceiling (descriptors only)"};
  std::string in_dev, out_dev;
  double seconds = 0;
  app.add_option("--in", in_dev, "Interface to receive on (queue 0)")->required();
  app.add_option("--out", out_dev, "Interface to transmit on (queue 0)")->required();
  app.add_option("--seconds", seconds, "Stop after this long (default: until signalled)");
  CLI11_PARSE(app, argc, argv);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  Forwarder f;
  f.area = mmap(nullptr, size_t{kFrames} * kFrameSize, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (f.area == MAP_FAILED) return fail("mmap", errno);
  xsk_umem_config uc{kFrames, kRing, kFrameSize, 0, 0};
  if (int rc = xsk_umem__create(&f.umem, f.area, size_t{kFrames} * kFrameSize, &f.in_fill,
                                &f.in_comp, &uc))
    return fail("UMEM", rc);
  xsk_socket_config sc{};
  sc.rx_size = kRing;
  sc.tx_size = kRing;
  sc.bind_flags = XDP_COPY | XDP_USE_NEED_WAKEUP;
  // IN: libxdp loads its default program, which redirects every frame of the queue here.
  if (int rc = xsk_socket__create(&f.in, in_dev.c_str(), 0, f.umem, &f.in_rx, nullptr, &sc))
    return fail(("socket on " + in_dev).c_str(), rc);
  // OUT: transmit only, no program (nothing is received on it).
  sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  if (int rc = xsk_socket__create_shared(&f.out, out_dev.c_str(), 0, f.umem, nullptr, &f.out_tx,
                                         &f.out_fill, &f.out_comp, &sc))
    return fail(("socket on " + out_dev).c_str(), rc);
  // Every frame starts in IN's fill ring.
  uint64_t addrs[kFrames];
  for (uint32_t i = 0; i < kFrames; ++i)
    addrs[i] = uint64_t{i} * kFrameSize;
  f.refill(addrs, kFrames);

  std::fprintf(stderr, "xsk_fwd: forwarding %s -> %s\n", in_dev.c_str(), out_dev.c_str());
  const uint64_t end = seconds > 0 ? now_ns() + static_cast<uint64_t>(seconds * 1e9) : UINT64_MAX;
  for (uint32_t i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    f.step();
    if ((i & 1023) == 0 && now_ns() >= end) break;
  }
  std::printf("{\"rx\":%llu,\"tx\":%llu,\"dropped\":%llu}\n", static_cast<unsigned long long>(f.rx),
              static_cast<unsigned long long>(f.tx), static_cast<unsigned long long>(f.dropped));
  return 0;
}
