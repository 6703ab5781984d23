// Human output of a reply: the command's View (sent by vecflowd with the result) turned into
// aligned tables and "name: value" lists, numbers printed with their units. A part that adds
// a command describes its View once, in vecflowd; vecflowctl needs no change to print it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "client.h"

namespace vecflowctl {

// One value in a unit of the protocol's View ("pps", "bps", "bytes", "percent", "seconds",
// "count", "cycles" or "" for as-is). null prints as "-".
std::string format_value(const Json& value, std::string_view unit);

// Block-style YAML of a JSON value, null members left out (the appliance file's syntax when
// the value is the configuration).
std::string to_yaml(const Json& value);

// The result printed by its view. `all`: keep rows the view hides when zero. `max_width`: the
// terminal's columns (0: no limit); a wider table loses its trailing text first, then whole
// columns from the right, and says which. Without a view, the result as indented JSON.
std::string render(const Json& result, const Json& view, bool all, size_t max_width = 0);

}  // namespace vecflowctl
