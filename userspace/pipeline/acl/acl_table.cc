#include "pipeline/acl/acl_table.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include <rte_errno.h>

namespace vecflow {

namespace {

// Field definitions: rte_acl reads the key in 4-byte input words, and the first field must be
// one byte long (the protocol).
enum : uint8_t { kProto, kSrc, kDst, kPorts };
constexpr int kPorts4 = 3, kContext4 = 5, kPorts6 = 9, kContext6 = 11;

rte_acl_field_def field(uint8_t type, uint8_t size, uint8_t index, uint8_t input, uint32_t offset) {
  rte_acl_field_def d{};
  d.type = type;
  d.size = size;
  d.field_index = index;
  d.input_index = input;
  d.offset = offset;
  return d;
}

std::vector<rte_acl_field_def> fields4(bool context) {
  std::vector<rte_acl_field_def> f = {
      field(RTE_ACL_FIELD_TYPE_BITMASK, 1, 0, 0, offsetof(AclKey4, proto)),
      field(RTE_ACL_FIELD_TYPE_MASK, 4, 1, 1, offsetof(AclKey4, src)),
      field(RTE_ACL_FIELD_TYPE_MASK, 4, 2, 2, offsetof(AclKey4, dst)),
      field(RTE_ACL_FIELD_TYPE_RANGE, 2, kPorts4, 3, offsetof(AclKey4, src_port)),
      field(RTE_ACL_FIELD_TYPE_RANGE, 2, kPorts4 + 1, 3, offsetof(AclKey4, dst_port)),
  };
  if (context) {
    f.push_back(field(RTE_ACL_FIELD_TYPE_BITMASK, 2, kContext4, 4, offsetof(AclKey4, in_port)));
    f.push_back(field(RTE_ACL_FIELD_TYPE_BITMASK, 2, kContext4 + 1, 4, offsetof(AclKey4, ct)));
  }
  return f;
}

std::vector<rte_acl_field_def> fields6(bool context) {
  std::vector<rte_acl_field_def> f;
  f.push_back(field(RTE_ACL_FIELD_TYPE_BITMASK, 1, 0, 0, offsetof(AclKey6, proto)));
  for (uint8_t i = 0; i < 4; ++i)
    f.push_back(field(RTE_ACL_FIELD_TYPE_MASK, 4, 1 + i, 1 + i, offsetof(AclKey6, src) + 4 * i));
  for (uint8_t i = 0; i < 4; ++i)
    f.push_back(field(RTE_ACL_FIELD_TYPE_MASK, 4, 5 + i, 5 + i, offsetof(AclKey6, dst) + 4 * i));
  f.push_back(field(RTE_ACL_FIELD_TYPE_RANGE, 2, kPorts6, 9, offsetof(AclKey6, src_port)));
  f.push_back(field(RTE_ACL_FIELD_TYPE_RANGE, 2, kPorts6 + 1, 9, offsetof(AclKey6, dst_port)));
  if (context) {
    f.push_back(field(RTE_ACL_FIELD_TYPE_BITMASK, 2, kContext6, 10, offsetof(AclKey6, in_port)));
    f.push_back(field(RTE_ACL_FIELD_TYPE_BITMASK, 2, kContext6 + 1, 10, offsetof(AclKey6, ct)));
  }
  return f;
}

// A rule with any number of fields (rte_acl_rule's field array is flexible).
struct RuleBuf {
  explicit RuleBuf(size_t fields) : bytes(RTE_ACL_RULE_SZ(fields)) {}
  rte_acl_rule* get() { return reinterpret_cast<rte_acl_rule*>(bytes.data()); }
  std::vector<uint8_t> bytes;
};

// Sets 32-bit MASK fields [first, first+words) from a prefix (any fields when absent).
void set_prefix(rte_acl_rule* r, int first, int words, const std::optional<IpPrefix>& p) {
  for (int w = 0; w < words; ++w) {
    rte_acl_field& f = r->field[first + w];
    if (!p) {
      f.value.u32 = 0;
      f.mask_range.u32 = 0;
      continue;
    }
    uint32_t word;
    std::memcpy(&word, p->addr.bytes.data() + 4 * w, 4);
    int bits = std::clamp(int(p->length) - 32 * w, 0, 32);
    f.value.u32 = rte_be_to_cpu_32(word);
    f.mask_range.u32 = static_cast<uint32_t>(bits);
  }
}

void set_common(rte_acl_rule* r, const config::FiveTupleMatch& m, int ports_field, uint32_t index) {
  r->data.category_mask = 1;
  // First match wins: earlier rules get higher priorities.
  r->data.priority = static_cast<int32_t>(RTE_ACL_MAX_PRIORITY - index);
  r->data.userdata = index + 1;
  r->field[kProto].value.u8 = m.l4_proto.value_or(0);
  r->field[kProto].mask_range.u8 = m.l4_proto ? 0xff : 0;
  config::PortRange any{0, 65535};
  config::PortRange sp = m.src_port.value_or(any);
  config::PortRange dp = m.dst_port.value_or(any);
  r->field[ports_field].value.u16 = sp.low;
  r->field[ports_field].mask_range.u16 = sp.high;
  r->field[ports_field + 1].value.u16 = dp.low;
  r->field[ports_field + 1].mask_range.u16 = dp.high;
}

// The ingress port and one conntrack mark (0xffff: any port; None: any mark).
void set_context(rte_acl_rule* r, int first, uint16_t in_port, CtMark ct) {
  r->field[first].value.u16 = in_port == 0xffff ? 0 : in_port;
  r->field[first].mask_range.u16 = in_port == 0xffff ? 0 : 0xffff;
  const uint16_t bit = ct == CtMark::None ? 0 : static_cast<uint16_t>(1u << unsigned(ct));
  r->field[first + 1].value.u16 = bit;
  r->field[first + 1].mask_range.u16 = bit;
}

Result<DpdkPtr<rte_acl_ctx>> compile(const std::vector<rte_acl_field_def>& defs,
                                     std::vector<RuleBuf>& rules, const char* family) {
  std::string name = dpdk_name(family);
  rte_acl_param p{};
  p.name = name.c_str();
  p.socket_id = SOCKET_ID_ANY;
  p.rule_size = static_cast<uint32_t>(RTE_ACL_RULE_SZ(defs.size()));
  p.max_rule_num = static_cast<uint32_t>(rules.size());
  DpdkPtr<rte_acl_ctx> ctx(rte_acl_create(&p));
  if (!ctx) return fail("cannot create an {} ACL: {}", family, rte_strerror(rte_errno));
  for (auto& r : rules) {
    int rc = rte_acl_add_rules(ctx.get(), r.get(), 1);
    if (rc != 0) return fail("cannot add an {} ACL rule: {}", family, errno_text(rc));
  }
  rte_acl_config cfg{};
  cfg.num_categories = 1;
  cfg.num_fields = static_cast<uint32_t>(defs.size());
  std::copy(defs.begin(), defs.end(), cfg.defs);
  cfg.max_size = 0;  // no limit: rte_acl splits the trie as it needs
  int rc = rte_acl_build(ctx.get(), &cfg);
  if (rc != 0)
    return fail("cannot compile the {} ACL ({} rules): {}", family, rules.size(), errno_text(rc));
  return ctx;
}

}  // namespace

bool AclConfig::uses_context() const noexcept {
  return std::any_of(rules.begin(), rules.end(),
                     [](const AclRule& r) { return r.in_port || !r.ct.empty(); });
}

Result<std::unique_ptr<AclTable>> AclTable::build(const AclConfig& acl, unsigned lcore_slots,
                                                  const std::vector<std::string>& ports) {
  std::unique_ptr<AclTable> t(new AclTable());
  t->acl_ = acl;
  const bool context = acl.uses_context();
  const auto d4 = fields4(context);
  const auto d6 = fields6(context);
  std::vector<RuleBuf> r4, r6;
  const uint32_t n = static_cast<uint32_t>(acl.rules.size());
  if (n >= RTE_ACL_MAX_PRIORITY) return fail("too many ACL rules ({})", n);
  for (uint32_t i = 0; i < n; ++i) {
    const config::FiveTupleMatch& m = acl.rules[i].match;
    const int version = m.src ? m.src->addr.version : m.dst ? m.dst->addr.version : 0;
    if (m.src && m.dst && m.src->addr.version != m.dst->addr.version)
      return fail("ACL rule {}: src and dst are of different IP versions", acl.rules[i].name);
    uint16_t in_port = 0xffff;
    if (const auto& name = acl.rules[i].in_port) {
      auto it = std::find(ports.begin(), ports.end(), *name);
      if (it == ports.end()) return fail("ACL rule {}: no port {}", acl.rules[i].name, *name);
      in_port = static_cast<uint16_t>(it - ports.begin());
    }
    // A rule that takes several conntrack marks is one rte_acl rule per mark, all with its
    // priority and result: the mark is one bit of the key, and a bitmask field matches one
    // pattern.
    std::vector<CtMark> marks = acl.rules[i].ct;
    if (marks.empty()) marks.push_back(CtMark::None);
    for (CtMark ct : marks) {
      if (version != 6) {
        RuleBuf& b = r4.emplace_back(d4.size());
        set_common(b.get(), m, kPorts4, i);
        set_prefix(b.get(), kSrc, 1, m.src);
        set_prefix(b.get(), kDst, 1, m.dst);
        if (context) set_context(b.get(), kContext4, in_port, ct);
      }
      if (version != 4) {
        RuleBuf& b = r6.emplace_back(d6.size());
        set_common(b.get(), m, kPorts6, i);
        set_prefix(b.get(), 1, 4, m.src);
        set_prefix(b.get(), 5, 4, m.dst);
        if (context) set_context(b.get(), kContext6, in_port, ct);
      }
    }
  }
  if (!r4.empty()) {
    auto ctx = compile(d4, r4, "acl4");
    if (!ctx) return std::unexpected(ctx.error());
    t->ctx4_ = std::move(*ctx);
  }
  if (!r6.empty()) {
    auto ctx = compile(d6, r6, "acl6");
    if (!ctx) return std::unexpected(ctx.error());
    t->ctx6_ = std::move(*ctx);
  }
  t->actions_.push_back(acl.default_action);
  for (const auto& r : acl.rules)
    t->actions_.push_back(r.action);
  t->stride_ = (n + 1 + 3) / 4 * 4;
  t->lcores_ = lcore_slots;
  t->lines_.reset(new Line[t->stride_ / 4 * lcore_slots]);
  t->base_.assign(n + 1, AclRuleCount{});
  return t;
}

AclRuleCount AclTable::total(uint32_t result) const noexcept {
  AclRuleCount c = base_[result];
  for (unsigned l = 0; l < lcores_; ++l) {
    const Slot& s = slots()[size_t(l) * stride_ + result];
    c.packets += s.packets.load();
    c.bytes += s.bytes.load();
  }
  return c;
}

bool same_acl_rule(const AclRule& a, const AclRule& b) noexcept {
  return a.name == b.name && a.action == b.action && a.in_port == b.in_port && a.ct == b.ct &&
         a.match.src == b.match.src && a.match.dst == b.match.dst &&
         a.match.l4_proto == b.match.l4_proto && a.match.src_port == b.match.src_port &&
         a.match.dst_port == b.match.dst_port;
}

void AclTable::carry_over(const AclTable& old) {
  if (old.acl_.default_action == acl_.default_action) base_[0] = old.total(0);
  std::unordered_map<std::string_view, size_t> by_name;
  for (size_t j = 0; j < old.acl_.rules.size(); ++j)
    by_name.emplace(old.acl_.rules[j].name, j);
  for (size_t i = 0; i < acl_.rules.size(); ++i) {
    auto it = by_name.find(acl_.rules[i].name);
    if (it != by_name.end() && same_acl_rule(acl_.rules[i], old.acl_.rules[it->second]))
      base_[i + 1] = old.total(static_cast<uint32_t>(it->second + 1));
  }
}

}  // namespace vecflow
