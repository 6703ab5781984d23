#include "io/afxdp/xsk_fds.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

#ifndef AF_XDP
#define AF_XDP 44
#endif

namespace vecflow {

std::set<int> open_xsk_fds() {
  std::set<int> out;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int domain = 0;
    socklen_t len = sizeof(domain);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
        domain == AF_XDP) {
      out.insert(static_cast<int>(fd));
    }
  }
  closedir(dir);
  return out;
}

}  // namespace vecflow
