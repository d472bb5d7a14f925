// Helpers for tests that build prim graphs by hand.
#pragma once

#include "prims/prim_graph.h"
#include "tests/cpp/runtime/python_test_util.h"
#include "tests/cpp/test_metas.h"

namespace kiln::prims::test {

using kiln::test::eval;
using kiln::test::f32;
using kiln::test::PyRef;

// Adds `x.add_(other)`, an extern call writing x in place (Note [Extern
// writes]); returns its result's value id.
inline int add_in_place(PrimGraph& g, int x, int other) {
  kiln::test::PyRef add_ = kiln::test::eval("torch.Tensor.add_");
  PrimAttrs call;
  call.target = add_.release();  // the attrs own it
  call.target_name = "Tensor.add_";
  call.extern_args = {graph::Arg::of_node(x), graph::Arg::of_node(other)};
  return g.add_node1(Prim::Extern, {}, std::move(call), g.value(x).meta);
}

}  // namespace kiln::prims::test
