#include "prims/prim.h"

namespace kiln::prims {
namespace {

constexpr PrimInfo kPrims[] = {
#define KILN_PRIM_INFO(name, text, family, arity, promotion, flags) \
  {text, Family::family, arity, PromotionKind::promotion, static_cast<uint16_t>(flags)},
    KILN_PRIM_LIST(KILN_PRIM_INFO)
#undef KILN_PRIM_INFO
};

constexpr const char* kFamilyNames[] = {
#define KILN_FAMILY_NAME(name, doc) #name,
    KILN_PRIM_FAMILIES(KILN_FAMILY_NAME)
#undef KILN_FAMILY_NAME
};

}  // namespace

int prim_count() { return static_cast<int>(sizeof(kPrims) / sizeof(kPrims[0])); }

const PrimInfo& prim_info(Prim prim) { return kPrims[static_cast<int>(prim)]; }

const char* prim_name(Prim prim) { return prim_info(prim).name; }

std::optional<Prim> prim_from_name(std::string_view name) {
  // A linear scan: lookups happen when graphs are built, not per call.
  for (int i = 0; i < prim_count(); ++i) {
    if (name == kPrims[i].name) return static_cast<Prim>(i);
  }
  return std::nullopt;
}

const char* family_name(Family family) { return kFamilyNames[static_cast<int>(family)]; }

}  // namespace kiln::prims
