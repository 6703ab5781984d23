#include "hooks/capture.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_mempool.h>
#include <rte_pcapng.h>
#include <rte_ring.h>

#include "core/dpdk_util.h"

namespace vecflow {

namespace {

// pcapng block types and fields (draft-ietf-opsawg-pcapng).
constexpr uint32_t kSectionHeaderBlock = 0x0A0D0D0A;
constexpr uint32_t kInterfaceBlock = 0x00000001;
constexpr uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr uint16_t kLinkTypeEthernet = 1;
constexpr uint16_t kOptEnd = 0;
constexpr uint16_t kOptIfName = 2;
constexpr uint16_t kOptIfTsResol = 9;
constexpr uint8_t kTsResolNanoseconds = 9;  // rte_pcapng_copy stamps nanoseconds
// Offset of the interface id in an enhanced packet block: rte_pcapng_copy leaves it for the
// writer to fill in.
constexpr size_t kEpbInterfaceIdOffset = 8;

void put32(std::vector<uint8_t>& b, uint32_t v) {
  b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4);
}
void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 2);
}
void put_option(std::vector<uint8_t>& b, uint16_t code, const void* data, uint16_t len) {
  put16(b, code);
  put16(b, len);
  auto* p = static_cast<const uint8_t*>(data);
  b.insert(b.end(), p, p + len);
  while (b.size() % 4)
    b.push_back(0);
}
// Closes a block: fills in its total length at both ends.
void finish_block(std::vector<uint8_t>& b, size_t start) {
  put32(b, 0);
  auto len = static_cast<uint32_t>(b.size() - start);
  std::memcpy(&b[start + 4], &len, 4);
  std::memcpy(&b[b.size() - 4], &len, 4);
}

std::vector<uint8_t> file_header(const std::vector<std::string>& ports, uint32_t snaplen) {
  std::vector<uint8_t> b;
  put32(b, kSectionHeaderBlock);
  put32(b, 0);
  put32(b, kByteOrderMagic);
  put16(b, 1);           // major version
  put16(b, 0);           // minor version
  put32(b, 0xffffffff);  // section length unknown (64 bits of -1)
  put32(b, 0xffffffff);
  finish_block(b, 0);
  for (const std::string& name : ports) {
    size_t start = b.size();
    put32(b, kInterfaceBlock);
    put32(b, 0);
    put16(b, kLinkTypeEthernet);
    put16(b, 0);
    put32(b, snaplen);
    put_option(b, kOptIfName, name.data(), static_cast<uint16_t>(name.size()));
    put_option(b, kOptIfTsResol, &kTsResolNanoseconds, 1);
    put_option(b, kOptEnd, nullptr, 0);
    finish_block(b, start);
  }
  return b;
}

}  // namespace

Result<std::shared_ptr<PcapngCapture>> PcapngCapture::open(const std::string& path,
                                                           const std::vector<std::string>& ports,
                                                           uint32_t snaplen) {
  std::shared_ptr<PcapngCapture> c(new PcapngCapture());
  c->path_ = path;
  c->snaplen_ = snaplen;
  c->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (c->fd_ < 0) return fail("cannot create capture file {}: {}", path, errno_text(errno));
  auto header = file_header(ports, snaplen);
  if (::write(c->fd_, header.data(), header.size()) != static_cast<ssize_t>(header.size()))
    return fail("cannot write capture file {}: {}", path, errno_text(errno));
  std::string rname = dpdk_name("capring");
  c->ring_ = rte_ring_create(rname.c_str(), kRingSize, SOCKET_ID_ANY, RING_F_SC_DEQ);
  if (c->ring_ == nullptr)
    return fail("cannot create the capture ring: {}", rte_strerror(rte_errno));
  // Copies longer than one buffer are chained by rte_pktmbuf_copy, so buffers of the default
  // size keep the pool small whatever the snap length.
  std::string pname = dpdk_name("cappool");
  c->pool_ = rte_pktmbuf_pool_create(pname.c_str(), kRingSize * 2 - 1, 64, 0,
                                     RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  if (c->pool_ == nullptr)
    return fail("cannot create the capture buffer pool: {}", rte_strerror(rte_errno));
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
  if (fd_ >= 0) ::close(fd_);
}

size_t PcapngCapture::capture(std::span<rte_mbuf* const> pkts, CaptureDirection dir,
                              uint32_t queue) noexcept {
  rte_mbuf* copies[64];
  const uint64_t now = rte_get_tsc_cycles();
  uint64_t made = 0, lost = 0;
  for (size_t base = 0; base < pkts.size(); base += 64) {
    unsigned n = 0;
    const size_t end = std::min(pkts.size(), base + 64);
    for (size_t i = base; i < end; ++i) {
      rte_mbuf* c = rte_pcapng_copy(pkts[i]->port, queue, pkts[i], pool_, snaplen_, now,
                                    static_cast<rte_pcapng_direction>(dir));
      if (c == nullptr) {
        ++lost;
        continue;
      }
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
  if (made) captured_.fetch_add(made, std::memory_order_relaxed);
  if (lost) dropped_.fetch_add(lost, std::memory_order_relaxed);
  return made;
}

unsigned PcapngCapture::write_some(unsigned max) noexcept {
  rte_mbuf* m[kWriteBurst];
  unsigned n = rte_ring_sc_dequeue_burst(ring_, reinterpret_cast<void**>(m),
                                         std::min(max, kWriteBurst), nullptr);
  if (n == 0) return 0;
  iovec iov[IOV_MAX];
  unsigned segs = 0;
  uint64_t bytes = 0;
  auto flush = [&] {
    if (segs == 0) return;
    if (::writev(fd_, iov, static_cast<int>(segs)) < 0) write_errors_.add();
    segs = 0;
  };
  for (unsigned i = 0; i < n; ++i) {
    uint32_t ifid = m[i]->port;
    std::memcpy(rte_pktmbuf_mtod_offset(m[i], uint8_t*, kEpbInterfaceIdOffset), &ifid, 4);
    for (rte_mbuf* s = m[i]; s != nullptr; s = s->next) {
      if (segs == IOV_MAX) flush();
      iov[segs++] = iovec{rte_pktmbuf_mtod(s, void*), s->data_len};
      bytes += s->data_len;
    }
  }
  flush();
  rte_pktmbuf_free_bulk(m, n);
  written_.add(n);
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
  s.captured = captured_.load(std::memory_order_relaxed);
  s.dropped = dropped_.load(std::memory_order_relaxed);
  s.written = written_.load();
  s.bytes = bytes_.load();
  s.write_errors = write_errors_.load();
  return s;
}

}  // namespace vecflow
