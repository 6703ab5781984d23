#include "hooks/pcapng_capture.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include <rte_bpf.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "runtime/cycles.h"

namespace vecflow {

namespace {

// pcapng blocks and options (https://www.ietf.org/archive/id/draft-tuexen-opsawg-pcapng-05.html).
constexpr uint32_t kSectionHeaderBlock = 0x0A0D0D0A;
constexpr uint32_t kInterfaceBlock = 1;
constexpr uint32_t kEnhancedPacketBlock = 6;
constexpr uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr uint16_t kLinkTypeEthernet = 1;
constexpr uint16_t kOptEnd = 0;
constexpr uint16_t kOptIfName = 2;
constexpr uint16_t kOptShbUserAppl = 4;
constexpr uint16_t kOptIfTsResol = 9;
constexpr uint16_t kOptEpbFlags = 2;
constexpr char kTsResolNanoseconds = 9;

template <typename T>
void put(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void option(std::string& b, uint16_t code, std::string_view value) {
  put(b, code);
  put(b, static_cast<uint16_t>(value.size()));
  b.append(value);
  b.resize((b.size() + 3) & ~size_t{3});
}

// A block around `body`: type and total length, then the length again.
std::string block(uint32_t type, const std::string& body) {
  std::string b;
  auto total = static_cast<uint32_t>(12 + body.size());
  put(b, type);
  put(b, total);
  b += body;
  put(b, total);
  return b;
}

// The block that describes one interface: Ethernet, `snaplen`, its name, nanosecond stamps.
std::string interface_block(const std::string& name, uint32_t snaplen) {
  std::string body;
  put(body, kLinkTypeEthernet);
  put(body, uint16_t{0});
  put(body, snaplen);
  option(body, kOptIfName, name);
  option(body, kOptIfTsResol, std::string_view(&kTsResolNanoseconds, 1));
  option(body, kOptEnd, "");
  return block(kInterfaceBlock, body);
}

std::string file_header(const CaptureOptions& o) {
  std::string body;
  put(body, kByteOrderMagic);
  put(body, uint16_t{1});  // version 1.0
  put(body, uint16_t{0});
  put(body, int64_t{-1});  // section length unknown
  option(body, kOptShbUserAppl, "vecflowd");
  option(body, kOptEnd, "");
  std::string out = block(kSectionHeaderBlock, body);
  for (const auto& iface : o.interfaces)
    out += interface_block(iface.second, o.snaplen);
  return out;
}

// An enhanced packet block is written as: this header, the copy's segments, then the trailer.
struct EpbHeader {
  uint32_t type = kEnhancedPacketBlock;
  uint32_t total_length;
  uint32_t interface;
  uint32_t ts_high;
  uint32_t ts_low;
  uint32_t captured_length;
  uint32_t original_length;
};
struct EpbTrailer {
  uint8_t bytes[20];  // padding of the data to 4 bytes, epb_flags, end of options, length
  uint32_t size;
};

EpbTrailer epb_trailer(uint32_t caplen, uint32_t flags, uint32_t* total_length) {
  EpbTrailer t{};
  uint32_t pad = (4 - caplen % 4) % 4;
  uint8_t* p = t.bytes + pad;  // the padding stays zero
  uint16_t opt[2] = {kOptEpbFlags, 4};
  std::memcpy(p, opt, 4);
  std::memcpy(p + 4, &flags, 4);
  opt[0] = kOptEnd;
  opt[1] = 0;
  std::memcpy(p + 8, opt, 4);
  t.size = pad + 16;
  *total_length = static_cast<uint32_t>(sizeof(EpbHeader)) + caplen + t.size;
  std::memcpy(p + 12, total_length, 4);
  return t;
}

}  // namespace

PcapngCapture::PcapngCapture(CaptureOptions options)
    : Service("capture"), options_(std::move(options)) {}

Result<std::shared_ptr<PcapngCapture>> PcapngCapture::open(CaptureOptions options) {
  std::shared_ptr<PcapngCapture> c(new PcapngCapture(std::move(options)));
  const CaptureOptions& o = c->options_;
  std::fill(std::begin(c->interface_of_), std::end(c->interface_of_), kNoInterface);
  for (const auto& iface : o.interfaces) {
    if (to_index(iface.first) >= kMaxPorts)
      return fail("capture {}: no port {}", o.path, to_index(iface.first));
    c->interface_of_[to_index(iface.first)] = c->interfaces_++;
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (o.exclusive ? O_EXCL | O_NOFOLLOW : O_TRUNC);
  c->fd_ = ::open(o.path.c_str(), flags, 0640);
  if (c->fd_ < 0) return fail("cannot create {}: {}", o.path, std::strerror(errno));
  // From here on a failure removes the file it created.
  auto undo = [&](std::string why) {
    ::close(c->fd_);
    c->fd_ = -1;
    ::unlink(o.path.c_str());
    return fail("{}", why);
  };
  c->ring_ = rte_ring_create(o.ring_name.c_str(), o.ring_size, SOCKET_ID_ANY, RING_F_SC_DEQ);
  auto room = static_cast<uint16_t>(std::min<uint32_t>(o.snaplen, RTE_MBUF_DEFAULT_DATAROOM) +
                                    RTE_PKTMBUF_HEADROOM);
  c->pool_ = rte_pktmbuf_pool_create(o.pool_name.c_str(), o.pool_size, o.pool_cache,
                                     sizeof(CaptureRecord), room, SOCKET_ID_ANY);
  if (c->ring_ == nullptr || c->pool_ == nullptr)
    return undo(fmt::format("capture buffers for {}: {}", o.path, rte_strerror(rte_errno)));
  std::string header = file_header(o);
  if (::write(c->fd_, header.data(), header.size()) != static_cast<ssize_t>(header.size()))
    return undo(fmt::format("cannot write {}: {}", o.path, std::strerror(errno)));
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  c->start_tsc_ = rte_rdtsc();
  c->start_ns_ =
      static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  c->tsc_hz_ = tsc_hz();
  return c;
}

PcapngCapture::~PcapngCapture() {
  if (ring_ != nullptr) {
    rte_mbuf* m;
    while (rte_ring_sc_dequeue(ring_, reinterpret_cast<void**>(&m)) == 0)
      rte_pktmbuf_free(m);
    rte_ring_free(ring_);
  }
  if (pool_ != nullptr) rte_mempool_free(pool_);
  if (options_.filter != nullptr) rte_bpf_destroy(options_.filter);
  if (fd_ >= 0) ::close(fd_);
}

size_t PcapngCapture::capture(std::span<rte_mbuf* const> pkts, CaptureDirection dir,
                              std::optional<PortId> port) noexcept {
  if (!wants(dir) || pkts.empty()) return 0;
  const uint64_t now = rte_rdtsc();
  rte_mbuf* copies[64];
  uint64_t made = 0, lost = 0;
  for (size_t base = 0; base < pkts.size(); base += 64) {
    unsigned n = 0;
    const size_t end = std::min(pkts.size(), base + 64);
    for (size_t i = base; i < end; ++i) {
      rte_mbuf* m = pkts[i];
      // A cBPF program returns the bytes to keep; 0 rejects the packet.
      if (options_.filter != nullptr && rte_bpf_exec(options_.filter, m) == 0) continue;
      rte_mbuf* c = rte_pktmbuf_copy(m, pool_, 0, options_.snaplen);
      if (c == nullptr) {
        ++lost;
        continue;
      }
      *static_cast<CaptureRecord*>(rte_mbuf_to_priv(c)) =
          CaptureRecord{now, rte_pktmbuf_pkt_len(m), port ? to_index(*port) : m->port, dir, 0};
      copies[n++] = c;
    }
    unsigned queued =
        rte_ring_mp_enqueue_burst(ring_, reinterpret_cast<void**>(copies), n, nullptr);
    if (queued < n) {
      rte_pktmbuf_free_bulk(copies + queued, n - queued);
      lost += n - queued;
    }
    made += queued;
  }
  offered_.fetch_add(pkts.size(), std::memory_order_relaxed);
  if (made) captured_.fetch_add(made, std::memory_order_relaxed);
  if (lost) lost_.fetch_add(lost, std::memory_order_relaxed);
  return made;
}

uint64_t PcapngCapture::to_ns(uint64_t tsc) const noexcept {
  if (tsc <= start_tsc_ || tsc_hz_ == 0) return start_ns_;
  uint64_t dt = tsc - start_tsc_;
  return start_ns_ + dt / tsc_hz_ * 1'000'000'000u + dt % tsc_hz_ * 1'000'000'000u / tsc_hz_;
}

void PcapngCapture::add_interface(PortId port, const std::string& name) {
  if (to_index(port) >= kMaxPorts) return;
  std::lock_guard lock(new_mutex_);
  new_blocks_.emplace_back(port, interface_block(name, options_.snaplen));
  new_interfaces_.store(true, std::memory_order_release);
}

void PcapngCapture::write_new_interfaces() noexcept {
  std::lock_guard lock(new_mutex_);
  for (const auto& [port, bytes] : new_blocks_) {
    if (interface_of_[to_index(port)] != kNoInterface) continue;
    if (::write(fd_, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      last_error_.store(errno, std::memory_order_relaxed);
      write_errors_.add();
      continue;  // its copies stay filed under the first interface
    }
    interface_of_[to_index(port)] = interfaces_++;
  }
  new_blocks_.clear();
  new_interfaces_.store(false, std::memory_order_relaxed);
}

unsigned PcapngCapture::write_some(unsigned max) noexcept {
  rte_mbuf* m[kWriteBurst];
  unsigned n = rte_ring_sc_dequeue_burst(ring_, reinterpret_cast<void**>(m),
                                         std::min(max, kWriteBurst), nullptr);
  if (n == 0) return 0;
  // After the dequeue: a copy of a port added later was made after its add_interface.
  if (new_interfaces_.load(std::memory_order_acquire)) [[unlikely]]
    write_new_interfaces();
  // Copies past the limit are dropped, not written.
  unsigned keep = n;
  if (options_.limit != 0) {
    uint64_t room = options_.limit - std::min(options_.limit, written_.load());
    keep = static_cast<unsigned>(std::min<uint64_t>(n, room));
  }
  EpbHeader headers[kWriteBurst];
  EpbTrailer trailers[kWriteBurst];
  iovec iov[IOV_MAX];
  unsigned segs = 0;
  uint64_t bytes = 0;
  auto flush = [&] {
    if (segs == 0) return;
    if (::writev(fd_, iov, static_cast<int>(segs)) < 0) {
      last_error_.store(errno, std::memory_order_relaxed);
      write_errors_.add();
    }
    segs = 0;
  };
  for (unsigned i = 0; i < keep; ++i) {
    const auto* rec = static_cast<const CaptureRecord*>(rte_mbuf_to_priv(m[i]));
    uint32_t caplen = rte_pktmbuf_pkt_len(m[i]);
    uint64_t ns = to_ns(rec->tsc);
    EpbHeader& h = headers[i];
    h = EpbHeader{};
    trailers[i] = epb_trailer(caplen, rec->direction, &h.total_length);
    const uint32_t iface = rec->port < kMaxPorts ? interface_of_[rec->port] : kNoInterface;
    h.interface = iface != kNoInterface ? iface : 0;
    h.ts_high = static_cast<uint32_t>(ns >> 32);
    h.ts_low = static_cast<uint32_t>(ns);
    h.captured_length = caplen;
    h.original_length = rec->wire_len;
    if (segs + m[i]->nb_segs + 2 > IOV_MAX) flush();
    iov[segs++] = iovec{&h, sizeof(h)};
    for (rte_mbuf* s = m[i]; s != nullptr; s = s->next)
      iov[segs++] = iovec{rte_pktmbuf_mtod(s, void*), s->data_len};
    iov[segs++] = iovec{trailers[i].bytes, trailers[i].size};
    bytes += caplen;
  }
  flush();
  rte_pktmbuf_free_bulk(m, n);
  written_.add(keep);
  bytes_.add(bytes);
  return n;
}

bool PcapngCapture::poll() noexcept {
  return write_some(kWriteBurst) > 0;
}

void PcapngCapture::flush() noexcept {
  while (write_some(kWriteBurst) > 0) {
  }
}

CaptureStats PcapngCapture::stats() const noexcept {
  CaptureStats s;
  s.offered = offered_.load(std::memory_order_relaxed);
  s.captured = captured_.load(std::memory_order_relaxed);
  s.lost = lost_.load(std::memory_order_relaxed);
  s.written = written_.load();
  s.bytes = bytes_.load();
  s.write_errors = write_errors_.load();
  s.last_error = last_error_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace vecflow
