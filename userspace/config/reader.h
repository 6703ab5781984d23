// Typed, located reading of YAML nodes, for the loader and the stage types' readers
// (config/stage_type.h). Every reader call either
// produces a value or records a ConfigError at the offending node and carries on, so one run
// reports every mistake in the file.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.h"

namespace vecflow::config::detail {

class Ctx {
 public:
  // `text_bytes`: the file's size. Without aliases a file has fewer nodes than bytes, so a
  // budget of a million nodes plus one per byte never stops an honest file of any size.
  Ctx(std::string file, size_t text_bytes)
      : file_(std::move(file)), budget_(1'000'000 + text_bytes) {}

  Location at(const YAML::Node& n) const;
  Location at(const YAML::Mark& m) const;
  void error(const Location& where, std::string path, std::string message);
  void error(const YAML::Node& n, std::string path, std::string message) {
    error(at(n), std::move(path), std::move(message));
  }
  std::vector<ConfigError>& errors() { return errors_; }
  const std::string& file() const { return file_; }

  // Every node the loader looks at costs one unit. YAML aliases let a small file name the same
  // node many times over; the budget keeps a hostile file from making the loader's walk
  // explode. Returns false (and records one error) once the budget is spent.
  bool spend(const YAML::Node& n);

 private:
  std::string file_;
  std::vector<ConfigError> errors_;
  size_t budget_;
  bool budget_reported_ = false;
};

template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

// Reads one YAML mapping. The allowed keys are declared up front; unknown keys are reported
// with a did-you-mean, duplicates with both locations.
class MapReader {
 public:
  MapReader(Ctx& ctx, const YAML::Node& node, std::string path,
            std::vector<std::string_view> allowed);

  bool ok() const { return is_map_; }
  const std::string& path() const { return path_; }
  const YAML::Node& node() const { return node_; }
  std::string key_path(std::string_view key) const;

  // The value node of `key`, or an invalid node when absent.
  YAML::Node child(std::string_view key) const;
  bool has(std::string_view key) const { return child(key).IsDefined(); }
  // Records "missing required key" at this map when `key` is absent.
  bool require(std::string_view key);

  // Each getter leaves `out` unchanged when the key is absent or its value is invalid, and
  // returns true only when a valid value was read.
  bool get(std::string_view key, std::string& out);
  bool get(std::string_view key, bool& out);
  bool get(std::string_view key, uint32_t& out, uint64_t min, uint64_t max);
  bool get(std::string_view key, uint16_t& out, uint64_t min, uint64_t max);
  bool get_lcore(std::string_view key, unsigned& out);
  bool get_lcores(std::string_view key, std::vector<unsigned>& out);
  bool get_strings(std::string_view key, std::vector<std::string>& out);
  bool get_prefix(std::string_view key, std::optional<IpPrefix>& out);
  bool get_address(std::string_view key, std::optional<IpAddress>& out);
  bool get_mac(std::string_view key, std::optional<MacAddress>& out);
  bool get_port_range(std::string_view key, std::optional<PortRange>& out);
  bool get_l4_proto(std::string_view key, std::optional<uint8_t>& out);

  template <typename E>
  bool get_enum(std::string_view key, E& out, std::initializer_list<EnumName<E>> names);

 private:
  Ctx& ctx_;
  YAML::Node node_;
  std::string path_;
  bool is_map_ = false;
};

// What makes `text` unfit for a string of the appliance file, e.g. "contains a NUL byte
// (offset 3)" or "is not valid UTF-8 (byte 0xe9 at offset 3)"; nullopt when it is well-formed
// UTF-8 (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF) without NUL.
// Names and paths reach logs, the control socket's JSON and file names, none of which takes
// arbitrary bytes; the message never repeats the text, so it is valid UTF-8 itself.
std::optional<std::string> text_fault(std::string_view text);

// Scalar readers usable on sequence elements too.
std::optional<std::string> read_string(Ctx& ctx, const YAML::Node& n, const std::string& path);
std::optional<uint64_t> read_uint(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                  uint64_t min, uint64_t max);
std::string suggest(std::string_view word, const std::vector<std::string_view>& choices);
std::string join_names(const std::vector<std::string_view>& names);

// Walks a list, calling fn(element, "path[i]") for each; records an error if not a list.
template <typename Fn>
void for_each_item(Ctx& ctx, const YAML::Node& list, const std::string& path, Fn fn) {
  if (!list.IsDefined() || list.IsNull()) return;
  if (!ctx.spend(list)) return;
  if (!list.IsSequence()) {
    ctx.error(list, path, "expected a list");
    return;
  }
  for (size_t i = 0; i < list.size(); ++i)
    fn(list[i], path + "[" + std::to_string(i) + "]");
}

template <typename E>
bool MapReader::get_enum(std::string_view key, E& out, std::initializer_list<EnumName<E>> names) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto s = read_string(ctx_, n, key_path(key));
  if (!s) return false;
  std::vector<std::string_view> choices;
  for (const auto& e : names) {
    if (e.name == *s) {
      out = e.value;
      return true;
    }
    choices.push_back(e.name);
  }
  std::string hint = suggest(*s, choices);
  ctx_.error(n, key_path(key),
             "'" + *s + "' is not one of " + join_names(choices) +
                 (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
  return false;
}

}  // namespace vecflow::config::detail
