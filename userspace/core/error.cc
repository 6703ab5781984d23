#include "core/error.h"

#include <cstring>

namespace vecflow {

std::string errno_text(int err) {
  if (err < 0) err = -err;
  return fmt::format("{} (errno {})", std::strerror(err), err);
}

}  // namespace vecflow
