// Control-plane results: configuration, start-up and control requests return Result<T>, an
// operator-readable Error on failure. The data plane never returns these; it counts drops.
#pragma once

#include <expected>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace vecflow {

struct Error {
  std::string message;
};

template <typename T>
using Result = std::expected<T, Error>;

// Builds the unexpected value of a Result with a formatted message:
//   return fail("port {}: interface {} does not exist", name, ifname);
template <typename... Args>
std::unexpected<Error> fail(fmt::format_string<Args...> f, Args&&... args) {
  return std::unexpected(Error{fmt::format(f, std::forward<Args>(args)...)});
}

// Wraps a C API's negative-errno return into a Result<void>-style message.
std::string errno_text(int err);

}  // namespace vecflow
