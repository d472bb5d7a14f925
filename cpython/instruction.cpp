// Names of kiln's normalized ops, expanded from KILN_OP_LIST.
#include "cpython/instruction.h"

namespace kiln::cpython {

const char* op_name(Op op) {
  switch (op) {
#define KILN_OP_NAME(name, doc) \
  case Op::name:                \
    return #name;
    KILN_OP_LIST(KILN_OP_NAME)
#undef KILN_OP_NAME
  }
  return "<invalid Op>";
}

}  // namespace kiln::cpython
