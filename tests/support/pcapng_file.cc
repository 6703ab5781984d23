#include "support/pcapng_file.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include <pcap/pcap.h>

namespace vecflow::test {
namespace {

uint32_t u32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, &b[at], 4);
  return v;
}
uint16_t u16(const std::vector<uint8_t>& b, size_t at) {
  uint16_t v;
  std::memcpy(&v, &b[at], 2);
  return v;
}

// Calls `f(code, offset, length)` for each option in [at, end).
template <typename F>
void options(const std::vector<uint8_t>& b, size_t at, size_t end, F f) {
  while (at + 4 <= end) {
    uint16_t code = u16(b, at), len = u16(b, at + 2);
    if (code == 0 || at + 4 + len > end) return;
    f(code, at + 4, len);
    at += 4 + ((len + 3u) & ~3u);
  }
}

// The blocks of a little-endian pcapng file (vecflow writes host order on x86 and arm64).
std::string walk(const std::vector<uint8_t>& b, CaptureFile& out) {
  size_t at = 0;
  size_t packet = 0;
  while (at < b.size()) {
    if (at + 12 > b.size()) return "a block is cut short";
    uint32_t type = u32(b, at), len = u32(b, at + 4);
    if (len < 12 || len % 4 || at + len > b.size()) return "a block has a bad length";
    if (u32(b, at + len - 4) != len) return "a block's two lengths disagree";
    if (type == 1) {  // interface description
      std::string name;
      options(b, at + 16, at + len - 4, [&](uint16_t code, size_t v, uint16_t n) {
        if (code == 2) name.assign(reinterpret_cast<const char*>(&b[v]), n);
      });
      out.interfaces.push_back(name);
    } else if (type == 6) {  // enhanced packet
      if (packet >= out.packets.size()) return "more packet blocks than libpcap read";
      CapturedPacket& p = out.packets[packet++];
      p.interface = u32(b, at + 8);
      if (p.interface >= out.interfaces.size()) return "a packet names no interface";
      if (u32(b, at + 20) != p.caplen || u32(b, at + 24) != p.len)
        return "a packet's lengths differ from libpcap's";
      size_t opts = at + 28 + ((p.caplen + 3u) & ~3u);
      options(b, opts, at + len - 4, [&](uint16_t code, size_t v, uint16_t n) {
        if (code == 2 && n == 4) p.flags = u32(b, v);
      });
    }
    at += len;
  }
  if (packet != out.packets.size()) return "fewer packet blocks than libpcap read";
  return "";
}

}  // namespace

CaptureFile read_capture(const std::string& path) {
  CaptureFile out;
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p =
      pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (p == nullptr) {
    out.error = err;
    return out;
  }
  out.datalink = pcap_datalink(p);
  pcap_pkthdr* h;
  const u_char* data;
  int rc;
  while ((rc = pcap_next_ex(p, &h, &data)) == 1) {
    CapturedPacket c;
    c.caplen = h->caplen;
    c.len = h->len;
    c.ts_ns = static_cast<uint64_t>(h->ts.tv_sec) * 1'000'000'000u +
              static_cast<uint64_t>(h->ts.tv_usec);  // nanoseconds at this precision
    c.data.assign(data, data + h->caplen);
    out.packets.push_back(std::move(c));
  }
  if (rc != PCAP_ERROR_BREAK) out.error = pcap_geterr(p);
  pcap_close(p);
  if (!out.error.empty()) return out;
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  out.error = walk(bytes, out);
  return out;
}

}  // namespace vecflow::test
