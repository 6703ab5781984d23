#include "config/reader.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>

namespace vecflow::config::detail {

Location Ctx::at(const YAML::Mark& m) const {
  // yaml-cpp counts from 0 and uses -1 for "no position" (a node built, not parsed).
  return Location{file_, m.line >= 0 ? m.line + 1 : 0, m.column >= 0 ? m.column + 1 : 0};
}

Location Ctx::at(const YAML::Node& n) const {
  return at(n.Mark());
}

void Ctx::error(const Location& where, std::string path, std::string message) {
  errors_.push_back(ConfigError{where, std::move(path), std::move(message)});
}

bool Ctx::spend(const YAML::Node& n) {
  if (budget_ > 0) {
    --budget_;
    return true;
  }
  if (!budget_reported_) {
    budget_reported_ = true;
    error(n, "", "file expands to far more nodes than its size allows (alias bomb?); giving up");
  }
  return false;
}

std::string join_names(const std::vector<std::string_view>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) s += i + 1 == names.size() ? " or " : ", ";
    s += "'" + std::string(names[i]) + "'";
  }
  return s;
}

namespace {

// Edit distance counting a swap of two neighbouring letters as one edit (optimal string
// alignment): "afxpd" is one typo away from "afxdp", as a reader would count it.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string_view type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "a scalar";
    default:
      return "an undefined value";
  }
}

}  // namespace

std::optional<std::string> text_fault(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto not_utf8 = [&](size_t i) {
    return fmt::format("is not valid UTF-8 (byte {:#04x} at offset {})", byte(i), i);
  };
  for (size_t i = 0; i < text.size();) {
    const unsigned char b = byte(i);
    if (b == 0) return fmt::format("contains a NUL byte (offset {})", i);
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The length of the sequence `b` starts and the range its second byte must lie in (RFC
    // 3629 §4): the narrower ranges exclude overlong forms, surrogates and U+110000 on.
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) {
      len = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
      len = 3;
      if (b == 0xe0) lo = 0xa0;
      if (b == 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      len = 4;
      if (b == 0xf0) lo = 0x90;
      if (b == 0xf4) hi = 0x8f;
    } else {
      return not_utf8(i);
    }
    // A sequence cut short or broken names its first byte, where a reader would look: Latin-1
    // "café" is at fault at the 0xe9, not at the byte after it.
    if (text.size() - i < len) return not_utf8(i);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char c = byte(i + k);
      if (k == 1 ? c < lo || c > hi : c < 0x80 || c > 0xbf) return not_utf8(i);
    }
    i += len;
  }
  return std::nullopt;
}

std::string suggest(std::string_view word, const std::vector<std::string_view>& choices) {
  // A suggestion is worth showing when it is close relative to the word's length: one edit
  // for short keys, up to a third of the length for long ones.
  size_t limit = std::max<size_t>(1, word.size() / 3);
  std::string_view best;
  size_t best_d = limit + 1;
  for (auto c : choices) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return std::string(best);
}

std::optional<std::string> read_string(Ctx& ctx, const YAML::Node& n, const std::string& path) {
  if (!ctx.spend(n)) return std::nullopt;
  if (!n.IsScalar()) {
    ctx.error(n, path, fmt::format("expected a string, found {}", type_name(n)));
    return std::nullopt;
  }
  if (auto fault = text_fault(n.Scalar())) {
    ctx.error(n, path, "the string " + *fault);
    return std::nullopt;
  }
  return n.Scalar();
}

std::optional<uint64_t> read_uint(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                  uint64_t min, uint64_t max) {
  if (!ctx.spend(n)) return std::nullopt;
  if (!n.IsScalar()) {
    ctx.error(n, path, fmt::format("expected an integer, found {}", type_name(n)));
    return std::nullopt;
  }
  const std::string& s = n.Scalar();
  if (auto fault = text_fault(s)) {
    ctx.error(n, path, "expected an integer, found a string that " + *fault);
    return std::nullopt;
  }
  const char* const last = s.data() + s.size();
  const auto out_of_range = [&] {
    ctx.error(n, path, fmt::format("expected an integer from {} to {}, found {}", min, max, s));
    return std::nullopt;
  };
  // A negative number is a number out of range, not text that is no number.
  int64_t negative = 0;
  if (auto [end, ec] = std::from_chars(s.data(), last, negative);
      end == last &&
      (ec == std::errc::result_out_of_range || (ec == std::errc() && negative < 0))) {
    return out_of_range();
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), last, v);
  if (s.empty() || ec == std::errc::invalid_argument || end != last) {
    ctx.error(n, path, fmt::format("expected an integer, found '{}'", s));
    return std::nullopt;
  }
  if (ec == std::errc::result_out_of_range || v < min || v > max) return out_of_range();
  return v;
}

MapReader::MapReader(Ctx& ctx, const YAML::Node& node, std::string path,
                     std::vector<std::string_view> allowed)
    : ctx_(ctx), node_(node), path_(std::move(path)) {
  if (!ctx_.spend(node)) return;
  if (!node.IsMap()) {
    ctx_.error(node, path_,
               path_.empty()
                   ? fmt::format("the file must be a mapping of sections (ports, steering, ...), "
                                 "found {}",
                                 type_name(node))
                   : fmt::format("expected a mapping, found {}", type_name(node)));
    return;
  }
  is_map_ = true;
  const std::vector<std::string_view>& choices = allowed;
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!ctx_.spend(it->first)) return;
    if (!it->first.IsScalar()) {
      ctx_.error(it->first, path_, "keys must be plain strings");
      continue;
    }
    const std::string& key = it->first.Scalar();
    if (auto fault = text_fault(key)) {
      ctx_.error(it->first, path_, "the key " + *fault);
      continue;
    }
    std::string kp = key_path(key);
    if (!seen.insert(key).second) {
      ctx_.error(it->first, kp, "duplicate key");
      continue;
    }
    if (std::find(choices.begin(), choices.end(), key) == choices.end()) {
      std::string hint = suggest(key, choices);
      ctx_.error(it->first, kp,
                 hint.empty() ? fmt::format("unknown key '{}' (expected one of {})", key,
                                            join_names(choices))
                              : fmt::format("unknown key '{}' (did you mean '{}'?)", key, hint));
    }
  }
}

std::string MapReader::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

YAML::Node MapReader::child(std::string_view key) const {
  if (!is_map_) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

bool MapReader::require(std::string_view key) {
  if (!is_map_) return false;
  if (has(key)) return true;
  ctx_.error(node_, key_path(key), fmt::format("missing required key '{}'", key));
  return false;
}

bool MapReader::get(std::string_view key, std::string& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto s = read_string(ctx_, n, key_path(key));
  if (!s) return false;
  out = *s;
  return true;
}

bool MapReader::get(std::string_view key, bool& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined() || !ctx_.spend(n)) return false;
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    ctx_.error(n, key_path(key), "expected true or false");
    return false;
  }
  out = v;
  return true;
}

bool MapReader::get(std::string_view key, uint32_t& out, uint64_t min, uint64_t max) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto v = read_uint(ctx_, n, key_path(key), min, max);
  if (!v) return false;
  out = static_cast<uint32_t>(*v);
  return true;
}

bool MapReader::get(std::string_view key, uint16_t& out, uint64_t min, uint64_t max) {
  uint32_t v = 0;
  if (!get(key, v, min, std::min<uint64_t>(max, UINT16_MAX))) return false;
  out = static_cast<uint16_t>(v);
  return true;
}

// RTE_MAX_LCORE in Debian's DPDK build.
constexpr uint64_t kMaxLcore = 127;

bool MapReader::get_lcore(std::string_view key, unsigned& out) {
  return get(key, out, 0, kMaxLcore);
}

bool MapReader::get_lcores(std::string_view key, std::vector<unsigned>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined() || !ctx_.spend(n)) return false;
  std::string kp = key_path(key);
  if (!n.IsSequence()) {
    ctx_.error(n, kp, fmt::format("expected a list of lcore numbers, found {}", type_name(n)));
    return false;
  }
  std::vector<unsigned> v;
  bool ok = true;
  for (size_t i = 0; i < n.size(); ++i) {
    auto id = read_uint(ctx_, n[i], fmt::format("{}[{}]", kp, i), 0, kMaxLcore);
    if (!id) {
      ok = false;
      continue;
    }
    if (std::find(v.begin(), v.end(), *id) != v.end()) {
      ctx_.error(n[i], fmt::format("{}[{}]", kp, i), fmt::format("lcore {} listed twice", *id));
      ok = false;
      continue;
    }
    v.push_back(static_cast<unsigned>(*id));
  }
  if (ok) out = std::move(v);
  return ok;
}

bool MapReader::get_strings(std::string_view key, std::vector<std::string>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined() || !ctx_.spend(n)) return false;
  std::string kp = key_path(key);
  if (!n.IsSequence()) {
    ctx_.error(n, kp, fmt::format("expected a list of strings, found {}", type_name(n)));
    return false;
  }
  std::vector<std::string> v;
  bool ok = true;
  for (size_t i = 0; i < n.size(); ++i) {
    auto s = read_string(ctx_, n[i], fmt::format("{}[{}]", kp, i));
    if (s) {
      v.push_back(*s);
    } else {
      ok = false;
    }
  }
  if (ok) out = std::move(v);
  return ok;
}

bool MapReader::get_prefix(std::string_view key, std::optional<IpPrefix>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto s = read_string(ctx_, n, key_path(key));
  if (!s) return false;
  std::string why;
  auto p = parse_ip_prefix(*s, &why);
  if (!p) {
    ctx_.error(n, key_path(key), fmt::format("invalid prefix '{}': {}", *s, why));
    return false;
  }
  out = *p;
  return true;
}

bool MapReader::get_address(std::string_view key, std::optional<IpAddress>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto s = read_string(ctx_, n, key_path(key));
  if (!s) return false;
  auto a = parse_ip_address(*s);
  if (!a) {
    ctx_.error(n, key_path(key), fmt::format("'{}' is not an IPv4 or IPv6 address", *s));
    return false;
  }
  out = *a;
  return true;
}

bool MapReader::get_mac(std::string_view key, std::optional<MacAddress>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto s = read_string(ctx_, n, key_path(key));
  if (!s) return false;
  auto m = parse_mac_address(*s);
  if (!m) {
    ctx_.error(n, key_path(key), fmt::format("'{}' is not a MAC address (aa:bb:cc:dd:ee:ff)", *s));
    return false;
  }
  out = *m;
  return true;
}

bool MapReader::get_port_range(std::string_view key, std::optional<PortRange>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto s = read_string(ctx_, n, key_path(key));
  if (!s) return false;
  auto parse = [](std::string_view t, uint16_t& v) {
    unsigned x = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || x > 65535) return false;
    v = static_cast<uint16_t>(x);
    return true;
  };
  PortRange r;
  std::string_view text = *s;
  auto dash = text.find('-');
  bool ok = dash == std::string_view::npos
                ? parse(text, r.low) && (r.high = r.low, true)
                : parse(text.substr(0, dash), r.low) && parse(text.substr(dash + 1), r.high);
  if (!ok) {
    ctx_.error(n, key_path(key),
               fmt::format("invalid port '{}': expected 0..65535 or a range like 1000-2000", *s));
    return false;
  }
  if (r.low > r.high) {
    ctx_.error(n, key_path(key), fmt::format("invalid port range '{}': start is above end", *s));
    return false;
  }
  out = r;
  return true;
}

bool MapReader::get_l4_proto(std::string_view key, std::optional<uint8_t>& out) {
  YAML::Node n = child(key);
  if (!n.IsDefined()) return false;
  auto s = read_string(ctx_, n, key_path(key));
  if (!s) return false;
  static constexpr std::pair<std::string_view, uint8_t> kNames[] = {
      {"tcp", 6},    {"udp", 17}, {"icmp", 1}, {"icmpv6", 58},
      {"sctp", 132}, {"gre", 47}, {"esp", 50}};
  for (auto [name, num] : kNames) {
    if (*s == name) {
      out = num;
      return true;
    }
  }
  unsigned num = 0;
  auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), num);
  if (ec == std::errc() && end == s->data() + s->size() && num <= 255) {
    out = static_cast<uint8_t>(num);
    return true;
  }
  std::vector<std::string_view> names;
  for (auto [name, num2] : kNames)
    names.push_back(name);
  std::string hint = suggest(*s, names);
  ctx_.error(
      n, key_path(key),
      fmt::format("unknown protocol '{}': expected {} or a number 0..255{}", *s, join_names(names),
                  hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
  return false;
}

}  // namespace vecflow::config::detail
