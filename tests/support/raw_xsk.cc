#include "support/raw_xsk.h"

#include <poll.h>
#include <sys/mman.h>

#include <cstring>

namespace vecflow::test {

RawXsk::RawXsk(const std::string& ifname, uint32_t frames) : frames_(frames) {
  size_ = size_t{frames_} * XSK_UMEM__DEFAULT_FRAME_SIZE;
  void* b = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) return;
  buffer_ = b;
  if (xsk_umem__create(&umem_, buffer_, size_, &fq_, &cq_, nullptr)) {
    umem_ = nullptr;
    return;
  }
  xsk_socket_config cfg{};
  cfg.rx_size = XSK_RING_CONS__DEFAULT_NUM_DESCS;
  cfg.tx_size = XSK_RING_PROD__DEFAULT_NUM_DESCS;
  cfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  cfg.bind_flags = XDP_COPY;
  if (xsk_socket__create(&xsk_, ifname.c_str(), 0, umem_, &rx_, &tx_, &cfg)) xsk_ = nullptr;
}

RawXsk::~RawXsk() {
  if (xsk_) xsk_socket__delete(xsk_);
  if (umem_) xsk_umem__delete(umem_);
  if (buffer_) munmap(buffer_, size_);
}

bool RawXsk::fill() {
  uint32_t idx = 0;
  if (xsk_ring_prod__reserve(&fq_, frames_, &idx) != frames_) return false;
  for (uint32_t i = 0; i < frames_; ++i)
    *xsk_ring_prod__fill_addr(&fq_, idx + i) = uint64_t{i} * XSK_UMEM__DEFAULT_FRAME_SIZE;
  xsk_ring_prod__submit(&fq_, frames_);
  return true;
}

std::vector<std::pair<vf_xdp_meta, Bytes>> RawXsk::receive(size_t want) {
  std::vector<std::pair<vf_xdp_meta, Bytes>> got;
  for (int spins = 0; spins < 100 && got.size() < want; ++spins) {
    pollfd p{fd(), POLLIN, 0};
    poll(&p, 1, 10);
    uint32_t idx = 0;
    const uint32_t n = xsk_ring_cons__peek(&rx_, 64, &idx);
    for (uint32_t i = 0; i < n; ++i) {
      const xdp_desc* d = xsk_ring_cons__rx_desc(&rx_, idx + i);
      auto* data = static_cast<uint8_t*>(xsk_umem__get_data(buffer_, d->addr));
      vf_xdp_meta m;
      std::memcpy(&m, data - sizeof(m), sizeof(m));
      got.emplace_back(m, Bytes(data, data + d->len));
      uint32_t fidx = 0;
      if (xsk_ring_prod__reserve(&fq_, 1, &fidx) == 1) {
        *xsk_ring_prod__fill_addr(&fq_, fidx) = xsk_umem__extract_addr(d->addr);
        xsk_ring_prod__submit(&fq_, 1);
      }
    }
    xsk_ring_cons__release(&rx_, n);
  }
  return got;
}

}  // namespace vecflow::test
