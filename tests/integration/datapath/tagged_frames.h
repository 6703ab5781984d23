// Tagged frames for the tests of VLAN sub-interfaces: a UDP frame with any 802.1Q / 802.1ad
// tags, and a packet socket that sends raw frames and reads what comes back with its tag
// (PACKET_AUXDATA: the kernel takes the tag off a received frame before a packet socket sees
// it). Raw frames rather than Linux VLAN devices on the hosts: the kernels these tests run on
// may lack 802.1Q (CONFIG_VLAN_8021Q).
#pragma once

#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "support/checksums.h"
#include "support/frame_builder.h"

namespace vecflow::test {

inline std::array<uint8_t, 6> mac_bytes(const std::string& text) {
  std::array<uint8_t, 6> m{};
  unsigned v[6];
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
    std::abort();
  for (int i = 0; i < 6; ++i)
    m[i] = uint8_t(v[i]);
  return m;
}

// The offset of an untagged UDP/IPv4 frame's payload (no IP options).
inline constexpr size_t kUdpPayload = 14 + 20 + 8;

// A UDP/IPv4 frame from `src`:`sport` to `dst`:`dport` with checksums, its payload starting with
// `mark` (a test's note of what it is, big-endian), tagged with `tags` (outer first, each a TPID
// and a TCI), addressed to `to`.
inline Bytes udp_frame(const std::array<uint8_t, 6>& to, std::array<uint8_t, 4> src,
                       std::array<uint8_t, 4> dst, uint16_t sport,
                       std::vector<std::pair<uint16_t, uint16_t>> tags = {}, uint16_t dport = 9,
                       uint16_t mark = 0) {
  Bytes f = FrameBuilder().ipv4(src, dst, 17).udp(sport, dport).payload(32).build();
  f[kUdpPayload] = uint8_t(mark >> 8);
  f[kUdpPayload + 1] = uint8_t(mark);
  fill_checksums(f);
  std::copy(to.begin(), to.end(), f.begin());
  for (auto it = tags.rbegin(); it != tags.rend(); ++it) {
    const uint8_t tag[4] = {uint8_t(it->first >> 8), uint8_t(it->first), uint8_t(it->second >> 8),
                            uint8_t(it->second)};
    f.insert(f.begin() + 12, tag, tag + 4);
  }
  return f;
}

struct Received {
  Bytes frame;                   // without its (outer) tag
  std::optional<uint16_t> vlan;  // the tag's VLAN id, if it had one
  uint16_t vlan_tpid = 0;        // and its TPID (0x8100, or 0x88a8 for 802.1ad)
};

// A packet socket on an interface of the calling thread's namespace that reports each
// received frame's VLAN tag.
class TaggedSocket {
 public:
  static constexpr int kReceiveBuffer = 16 << 20;
  explicit TaggedSocket(const std::string& ifname) {
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    int one = 1;
    if (fd_ < 0 || sll.sll_ifindex == 0 ||
        bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0 ||
        setsockopt(fd_, SOL_PACKET, PACKET_AUXDATA, &one, sizeof(one)) != 0 ||
        setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0 ||
        // Room for a few thousand frames read after the fact (root may pass rmem_max).
        setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &kReceiveBuffer, sizeof(kReceiveBuffer)) != 0) {
      if (fd_ >= 0) close(fd_);
      fd_ = -1;
    }
  }
  ~TaggedSocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool send(const Bytes& f) { return ::send(fd_, f.data(), f.size(), 0) == ssize_t(f.size()); }
  // Frames until `timeout_ms` passed without one.
  std::vector<Received> drain(int timeout_ms) {
    std::vector<Received> out;
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return out;
      Received r;
      r.frame.resize(65536);
      iovec iov{r.frame.data(), r.frame.size()};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(tpacket_auxdata))];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t n = recvmsg(fd_, &msg, 0);
      if (n < 0) return out;
      r.frame.resize(size_t(n));
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA) continue;
        tpacket_auxdata aux;
        std::memcpy(&aux, CMSG_DATA(c), sizeof(aux));
        if (aux.tp_status & TP_STATUS_VLAN_VALID) r.vlan = aux.tp_vlan_tci & 0x0fff;
        if (aux.tp_status & TP_STATUS_VLAN_TPID_VALID) r.vlan_tpid = aux.tp_vlan_tpid;
      }
      out.push_back(std::move(r));
    }
  }

 private:
  int fd_ = -1;
};

}  // namespace vecflow::test
