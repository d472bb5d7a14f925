#include "tracer/break_reason.h"

namespace kiln::tracer {

const char* break_code_name(BreakCode code) {
  switch (code) {
#define KILN_BREAK_NAME(name, hint) \
  case BreakCode::name: return #name;
    KILN_BREAK_REASONS(KILN_BREAK_NAME)
#undef KILN_BREAK_NAME
  }
  return "?";
}

const char* break_code_hint(BreakCode code) {
  switch (code) {
#define KILN_BREAK_HINT(name, hint) \
  case BreakCode::name: return hint;
    KILN_BREAK_REASONS(KILN_BREAK_HINT)
#undef KILN_BREAK_HINT
  }
  return "";
}

}  // namespace kiln::tracer
