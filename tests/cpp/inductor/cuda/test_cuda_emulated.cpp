// Generated CUDA kernels run on the host (cuda_host_emulator.h: the source
// compiled by g++ beside a shim, each CUDA thread a std::thread) over real
// tensors, compared with torch: prim graphs are scheduled and lowered as
// the inductor does, and both the scalar and, where there is one, the
// 16-byte vector entry of each kernel run. This checks the kernels' logic
// (indexing, broadcast, phases, warp and block combining, persistent rows,
// stores) where no GPU is; tests/python/test_inductor_cuda.py runs them on
// one.
#include <Python.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_source.h"
#include "inductor/lower_group.h"
#include "inductor/recompute_outputs.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "runtime/aten_bridge.h"
#include "tests/cpp/inductor/cuda/cuda_host_emulator.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::inductor::cuda {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using prims::Scalar;
using test::PyRef;

#define KILN_REQUIRE_HOST_COMPILER() \
  if (!test::host_compiler_available()) GTEST_SKIP() << "no g++ to compile kernels for the host"

constexpr const char* kTensors =
    "import torch\n"
    "torch.manual_seed(2)\n"
    "x = torch.randn(64, 33)\n"
    "y = torch.randn(64, 33)\n"
    "v1 = torch.randn(64, 64)\n"
    "v2 = torch.randn(64, 64)\n"
    "xt = torch.randn(33, 64).t()\n"
    "col = torch.randn(64, 1)\n"
    "row = torch.randn(1, 64)\n"
    "i = torch.randint(-50, 50, (64, 64))\n"
    "b = torch.rand(64, 64) > 0.5\n"
    "h = torch.randn(64, 64, dtype=torch.float16)\n"
    "bf = torch.randn(64, 64, dtype=torch.bfloat16)\n"
    "f32 = torch.randn(37, 45)\n"
    "f64 = torch.randn(37, 45, dtype=torch.float64)\n"
    "i32 = torch.randint(-5, 6, (37, 45), dtype=torch.int32)\n"
    "i64 = torch.randint(-5, 6, (37, 45))\n"
    "b8 = torch.rand(37, 45) > 0.3\n"
    "u8 = torch.randint(0, 255, (37, 45), dtype=torch.uint8)\n"
    "cube = torch.randn(6, 7, 9)\n"
    "big = torch.randn(300, 257)\n"
    "d100 = torch.randn(64, 100, dtype=torch.float64)\n"
    "k1 = torch.randn(5, 1000)\n"
    "k5 = torch.randn(4, 5000)\n"
    "k20 = torch.randn(3, 20000)\n"
    "tall = torch.randn(2000, 45)\n"
    "taller = torch.randn(4100, 37)\n"
    "k4 = torch.randn(16, 4096)\n"
    "w4 = torch.randn(4096)\n"
    "nan = torch.randn(5, 9)\n"
    "nan[1, 3] = float('nan')\n"
    "nan[4, 0] = float('nan')\n"
    "empty = torch.randn(5, 0)\n"
    // Launch configuration candidates: 7 rows (not a multiple of the rows
    // a block takes) of each length, a weight and a bias.
    "for n in (1, 31, 100, 1000, 4096, 5000):\n"
    "    globals()[f'c{n}'] = torch.randn(7, n) * 3\n"
    "    globals()[f'cw{n}'] = torch.randn(n)\n"
    "    globals()[f'cb{n}'] = torch.randn(n)\n"
    // Vector tiles: 200 columns (50 lanes of 4 floats), a bfloat16 block of
    // 96 (12 lanes of 8), a [4, 300, 40] cube summed over its middle dim,
    // and a layer_norm backward's operands over 96 columns.
    "wide = torch.randn(700, 200)\n"
    "wbf = torch.randn(300, 96).bfloat16()\n"
    "split3 = torch.randn(4, 300, 40)\n"
    "lnx = torch.randn(300, 96)\n"
    "lng = torch.randn(300, 96).bfloat16()\n"
    "lnm = torch.randn(300, 1)\n"
    "lnr = torch.rand(300, 1) + 0.5\n"
    "lnw = torch.randn(96)\n"
    // argmax/argmin: ties (first occurrence wins) along both dims.
    "ties = torch.randint(0, 3, (64, 300)).float()\n"
    // Run-time layouts: two batch sizes and lengths of one hidden size, a
    // per-length bias broadcast over the batch, a weight.
    "ra = torch.randn(6, 7, 40)\n"
    "rb = torch.randn(3, 11, 40)\n"
    "za = torch.randn(7, 40)\n"
    "zb = torch.randn(11, 40)\n"
    "rw = torch.randn(40)\n"
    // Boolean masks of 45, 38 and 20 keys (an attention bias padded to a
    // multiple of 16 keys: Note [Attention bias alignment]).
    "pm45 = torch.rand(2, 3, 45) > 0.5\n"
    "pm38 = torch.rand(2, 3, 38) > 0.5\n"
    "pm20 = torch.rand(2, 3, 20) > 0.5\n";

PyRef tensors() {
  static PyRef* ns = new PyRef(test::exec_module(kTensors));  // leaked: outlives Py_FinalizeEx
  return *ns;
}

PrimArg v(int id) { return PrimArg::of_value(id); }
PrimArg f(double value) { return PrimArg::of_scalar(Scalar::of_float(value)); }

struct Tolerance {
  double rtol = 0;  // 0 and atol 0: exact
  double atol = 0;
};

std::string tuple_text(const std::vector<int64_t>& values) {
  std::string text = "(";
  for (int64_t value : values) text += std::to_string(value) + ",";
  return text + ")";
}

// Compares `actual` with torch expression `expected` over the tensors.
void expect_close(const PyRef& ns, PyObject* actual, const std::string& expected, Tolerance tol) {
  PyRef want = PyRef::steal(PyRun_String(expected.c_str(), Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(want) << test::take_error();
  graph::TensorMeta a, e;
  runtime::read_tensor_meta(actual, &a);
  runtime::read_tensor_meta(want.get(), &e);
  EXPECT_EQ(graph::format_tensor_meta(a), graph::format_tensor_meta(e));
  PyDict_SetItemString(ns.get(), "_actual", actual);
  PyDict_SetItemString(ns.get(), "_expected", want.get());
  const std::string compare =
      tol.rtol == 0 && tol.atol == 0
          ? "torch.equal(_actual, _expected) or (_actual.is_floating_point() and "
            "bool(((_actual == _expected) | (_actual.isnan() & _expected.isnan())).all()))"
          : "torch.allclose(_actual.double(), _expected.double(), rtol=" + std::to_string(tol.rtol) +
                ", atol=" + std::to_string(tol.atol) + ", equal_nan=True)";
  PyRef same = PyRef::steal(PyRun_String(compare.c_str(), Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(same) << test::take_error();
  if (same.get() != Py_True) {
    PyRef diff = PyRef::steal(PyRun_String(
        "float((_actual.double() - _expected.double()).abs().nan_to_num(0).max()) if _actual.numel() else 0.0",
        Py_eval_input, ns.get(), ns.get()));
    ADD_FAILURE() << "values differ; max abs difference " << (diff ? PyFloat_AsDouble(diff.get()) : -1.0);
  }
}

// Vector entries check has run (its ASSERTs need a void function), so a
// test can tell its kernels had one.
size_t vector_entries_run = 0;

// What check does to the built graph before its final schedule.
enum class Rewrite { None, RecomputeOutputs };

// Builds a graph over the named tensors whose outputs `build` returns,
// rewrites it as `rewrite` says (which must change it), schedules it
// (expecting `kernels` groups), runs each kernel's entries on the host in
// graph order, and compares each graph output with the matching torch
// expression.
void check(const std::vector<std::string>& names,
           const std::function<std::vector<int>(PrimBuilder&, const std::vector<int>&)>& build,
           const std::vector<std::string>& torch_exprs, Tolerance tol = {}, size_t kernels = 1,
           Rewrite rewrite = Rewrite::None) {
  SCOPED_TRACE(torch_exprs.front());
  PyRef ns = tensors();
  PrimGraph graph;
  PrimBuilder builder(graph);
  std::vector<PyRef> values;  // by prim value id, as computed
  std::vector<int> ids;
  for (const std::string& name : names) {
    values.push_back(test::item(ns, name.c_str()));
    graph::TensorMeta meta;
    runtime::read_tensor_meta(values.back().get(), &meta);
    ids.push_back(graph.add_input(meta));
  }
  graph.set_outputs(build(builder, ids));
  if (rewrite == Rewrite::RecomputeOutputs) {
    PrimGraph rewritten;
    ASSERT_TRUE(recompute_kernel_outputs(graph, schedule_kernels(graph), &rewritten)) << prims::format_prim_graph(graph);
    ASSERT_EQ(rewritten.inputs(), graph.inputs());  // the input tensors keep their value ids
    graph = std::move(rewritten);
  }
  const std::vector<int> outs = graph.outputs();
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), kernels) << prims::format_prim_graph(graph);
  values.resize(graph.values().size());
  std::vector<PyRef> vector_outputs(graph.values().size());  // what the vector entries computed
  for (const KernelGroup& group : groups) {
    const LoweredKernel lowered = lower_group(graph, group);
    const Kernel& kernel = lowered.kernel;
    SCOPED_TRACE(format_kernel(kernel));
    const CudaSource source = generate_cuda_source(kernel);
    std::string error;
    std::unique_ptr<test::HostKernel> host;
    if (!source.empty) {
      host = test::HostKernel::compile(source, &error);
      ASSERT_TRUE(host) << error << "\n" << source.text;
    }
    for (bool vector : {false, true}) {
      if (vector && source.vector.name.empty()) continue;
      vector_entries_run += vector ? 1 : 0;
      std::vector<void*> pointers;
      for (int value : lowered.inputs) {
        ASSERT_TRUE(values[value]) << "kernel input %" << value << " is not computed";
        pointers.push_back(runtime::tensor_data(values[value].get()));
      }
      std::vector<PyRef> outputs;
      for (const KernelOutput& out : kernel.outputs) {
        const std::string make = "torch.empty_strided(" +
                                 tuple_text(out.has_tensor_shape ? out.tensor_sizes : kernel.sizes) + ", " +
                                 tuple_text(out.has_tensor_shape ? out.tensor_strides : out.strides) +
                                 ", dtype=torch." + graph::dtype_name(out.dtype) + ").fill_(77)";
        outputs.push_back(PyRef::steal(PyRun_String(make.c_str(), Py_eval_input, ns.get(), ns.get())));
        ASSERT_TRUE(outputs.back()) << test::take_error();
        pointers.push_back(runtime::tensor_data(outputs.back().get()));
      }
      if (host) {
        const CudaEntry& entry = vector ? source.vector : source.scalar;
        host->run(vector, pointers.data(), static_cast<unsigned>(std::min<int64_t>(entry.grid, 3)),
                  static_cast<unsigned>(entry.block));
      }
      for (size_t i = 0; i < lowered.outputs.size(); ++i) {
        (vector ? vector_outputs : values)[lowered.outputs[i]] = outputs[i];
      }
    }
  }
  ASSERT_EQ(outs.size(), torch_exprs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    SCOPED_TRACE(torch_exprs[i]);
    ASSERT_TRUE(values[outs[i]]) << "output %" << outs[i] << " was not computed by a kernel";
    expect_close(ns, values[outs[i]].get(), torch_exprs[i], tol);
    if (vector_outputs[outs[i]]) {
      SCOPED_TRACE("vector entry");
      expect_close(ns, vector_outputs[outs[i]].get(), torch_exprs[i], tol);
    }
  }
}

// gelu(z), erf form, as torch's decomposition.
int gelu(PrimBuilder& b, int z) {
  const int half = b.binary(Prim::Mul, v(z), f(0.5));
  const int e = b.unary(Prim::Erf, b.binary(Prim::Mul, v(z), f(0.7071067811865476)));
  return b.binary(Prim::Mul, v(half), v(b.binary(Prim::Add, v(e), f(1.0))));
}

TEST(CudaEmulated, GeluChainScalarAndVector) {
  KILN_REQUIRE_HOST_COMPILER();
  for (const char* pair : {"x,y", "v1,v2"}) {
    const std::string p = pair;
    const std::string a = p.substr(0, p.find(',')), c = p.substr(p.find(',') + 1);
    check({a, c},
          [](PrimBuilder& b, const std::vector<int>& in) {
            const int z = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(in[0]), v(in[1]))), f(1.0));
            return std::vector<int>{b.binary(Prim::Mul, v(gelu(b, z)), f(0.5))};
          },
          {"torch.nn.functional.gelu(" + a + " * " + c + " + 1) * 0.5"}, {1e-6, 1e-6});
  }
}

TEST(CudaEmulated, BroadcastTransposedWhereAndMixedDtypes) {
  KILN_REQUIRE_HOST_COMPILER();
  check({"col", "row", "v1"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{
              b.binary(Prim::Sub, v(b.binary(Prim::Mul, v(in[0]), v(in[1]))), v(b.binary(Prim::Mul, v(in[2]), v(in[1]))))};
        },
        {"col * row - v1 * row"});
  check({"xt", "x"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.binary(Prim::Maximum, v(in[0]), v(b.binary(Prim::Mul, v(in[1]), f(0.25))))};
        },
        {"torch.maximum(xt, x * 0.25)"});
  check({"b", "i", "v1"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int scaled = b.binary(Prim::Mul, v(in[1]), v(in[2]));  // int64 * float32 -> float32
          return std::vector<int>{b.where(in[0], v(scaled), v(b.unary(Prim::Neg, in[1]))),
                                  b.binary(Prim::Gt, v(in[1]), PrimArg::of_scalar(Scalar::of_int(3)))};
        },
        {"torch.where(b, i * v1, -i)", "i > 3"});
  // Integer arithmetic wraps and rounds as torch: abs, neg, floor, round
  // half to even. The two results read nothing in common but share their
  // iteration space: one kernel (Note [Kernel scheduling]).
  check({"i", "v1"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int r = b.unary(Prim::Round, b.binary(Prim::Mul, v(in[1]), f(2.5)));
          return std::vector<int>{b.binary(Prim::Sub, v(b.binary(Prim::Mul, v(in[0]), v(in[0]))), v(b.unary(Prim::Abs, in[0]))),
                                  b.binary(Prim::Add, v(r), v(b.unary(Prim::Floor, in[1])))};
        },
        {"i * i - i.abs()", "torch.round(v1 * 2.5) + torch.floor(v1)"}, {}, 1);
}

TEST(CudaEmulated, Float16AndBFloat16AreStorageTypes) {
  KILN_REQUIRE_HOST_COMPILER();
  for (const char* name : {"h", "bf"}) {
    const std::string t = name;
    check({name, "v1"},
          [](PrimBuilder& b, const std::vector<int>& in) {
            return std::vector<int>{b.unary(Prim::Sigmoid, in[0]), b.binary(Prim::Mul, v(in[0]), v(in[1]))};
          },
          {"torch.sigmoid(" + t + ".float()).to(" + t + ".dtype)", t + " * v1"}, {1e-2, 1e-3});
  }
}

const char* torch_name(Prim prim) {
  switch (prim) {
    case Prim::Sum: return "sum";
    case Prim::Prod: return "prod";
    case Prim::Amax: return "amax";
    default: return "amin";
  }
}

TEST(CudaEmulated, EveryReductionKindDtypeAndDim) {
  KILN_REQUIRE_HOST_COMPILER();
  for (Prim prim : {Prim::Sum, Prim::Prod, Prim::Amax, Prim::Amin}) {
    for (const char* name : {"f32", "f64", "i32", "i64", "b8", "u8"}) {
      const std::string t = name;
      if ((t == "b8" || t == "u8") && prim == Prim::Prod) continue;
      for (int64_t dim : {0, 1}) {
        const std::string input = prim == Prim::Prod && t[0] == 'f' ? "(" + t + " * 0.1 + 1)" : t;
        check({name},
              [&](PrimBuilder& b, const std::vector<int>& in) {
                int x = in[0];
                if (prim == Prim::Prod && t[0] == 'f') x = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(x), f(0.1))), f(1));
                return std::vector<int>{b.reduce(prim, x, {dim}, dim == 1)};
              },
              {"torch." + std::string(torch_name(prim)) + "(" + input + ", " + std::to_string(dim) +
               (dim == 1 ? ", keepdim=True)" : ")")},
              t[0] == 'f' ? Tolerance{1e-5, 1e-6} : Tolerance{});
      }
    }
  }
}

TEST(CudaEmulated, LongRowsFullReductionsNanAndEmpty) {
  KILN_REQUIRE_HOST_COMPILER();
  const Tolerance tol{1e-4, 1e-5};
  // Block rows: persistent (1000 points, 128 threads; 5000, 1024 threads)
  // and looped (20000), scalar and vector.
  for (const char* name : {"k1", "k5", "k20"}) {
    const std::string t = name;
    check({name},
          [](PrimBuilder& b, const std::vector<int>& in) {
            return std::vector<int>{b.reduce(Prim::Sum, b.unary(Prim::Exp, in[0]), {1}, false),
                                    b.reduce(Prim::Amax, in[0], {1}, false)};
          },
          {t + ".exp().sum(1)", t + ".amax(1)"}, tol);
  }
  check({"cube"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Sum, in[0], {0, 1, 2}, false)};
        },
        {"cube.sum()"}, tol);
  check({"nan"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Amax, in[0], {1}, false), b.reduce(Prim::Amin, in[0], {0}, false)};
        },
        {"nan.amax(1)", "nan.amin(0)"}, {}, 2);
  check({"empty"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Sum, in[0], {1}, true)};
        },
        {"empty.sum(1, keepdim=True)"});
}

TEST(CudaEmulated, SoftmaxAndLogSoftmaxInEveryRowMode) {
  KILN_REQUIRE_HOST_COMPILER();
  // big: warp rows, looped; d100: warp rows, persistent; k5: block rows;
  // cube over its middle dim: tile mode with two phases.
  for (const char* input : {"big", "d100", "k5", "cube", "xt"}) {
    for (bool log : {false, true}) {
      const std::string t = input;
      check({input},
            [&](PrimBuilder& b, const std::vector<int>& in) {
              const int max = b.reduce(Prim::Amax, in[0], {1}, true);
              const int shifted = b.binary(Prim::Sub, v(in[0]), v(max));
              const int e = b.unary(Prim::Exp, shifted);
              const int total = b.reduce(Prim::Sum, e, {1}, true);
              return std::vector<int>{log ? b.binary(Prim::Sub, v(shifted), v(b.unary(Prim::Log, total)))
                                          : b.binary(Prim::Div, v(e), v(total))};
            },
            {log ? "(" + t + " - " + t + ".amax(1, keepdim=True)) - (" + t + " - " + t +
                       ".amax(1, keepdim=True)).exp().sum(1, keepdim=True).log()"
                 : "(" + t + " - " + t + ".amax(1, keepdim=True)).exp() / (" + t + " - " + t +
                       ".amax(1, keepdim=True)).exp().sum(1, keepdim=True)"},
            {1e-5, 1e-6});
    }
  }
}

// Note [Cat in kernels]: rolls (one load at a selected index), a rotary
// half swap (a select between two clamped loads), a cat read by a row
// reduction, and a split view of a computed value; rolls along an outer
// dim also through the vector entry (the index is constant along its
// lanes), along the inner one scalar only.
TEST(CudaEmulated, CatsRollsAndSplitViewsReadAtComputedIndices) {
  KILN_REQUIRE_HOST_COMPILER();
  const size_t vectors_before = vector_entries_run;
  for (const char* input : {"v1", "bf"}) {
    check({input},
          [](PrimBuilder& b, const std::vector<int>& in) {
            const int x = b.cat({b.slice(in[0], 0, 59, 64, 1), b.slice(in[0], 0, 0, 59, 1)}, 0);
            return std::vector<int>{b.binary(Prim::Add, v(x), f(1.0))};
          },
          {std::string("torch.roll(") + input + ", 5, 0) + 1"}, {1e-2, 1e-2});
  }
  EXPECT_EQ(vector_entries_run - vectors_before, 2u);
  check({"v1"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int x = b.cat({b.slice(in[0], 1, 61, 64, 1), b.slice(in[0], 1, 0, 61, 1)}, 1);
          return std::vector<int>{b.binary(Prim::Mul, v(x), f(2.0))};
        },
        {"torch.roll(v1, 3, 1) * 2"});
  check({"cube"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          int x = b.binary(Prim::Mul, v(in[0]), f(2.0));
          x = b.cat({b.slice(x, 0, 4, 6, 1), b.slice(x, 0, 0, 4, 1)}, 0);
          x = b.cat({b.slice(x, 1, 3, 7, 1), b.slice(x, 1, 0, 3, 1)}, 1);
          return std::vector<int>{b.binary(Prim::Add, v(x), f(1.0))};
        },
        {"torch.roll(cube * 2, (2, -3), (0, 1)) + 1"});
  check({"v1", "v2"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int half = b.cat({b.unary(Prim::Neg, b.slice(in[0], 1, 32, 64, 1)), b.slice(in[0], 1, 0, 32, 1)}, 1);
          return std::vector<int>{b.binary(Prim::Mul, v(half), v(in[1]))};
        },
        {"torch.cat((-v1[:, 32:], v1[:, :32]), 1) * v2"});
  check({"x", "y"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int joined = b.cat({b.unary(Prim::Sin, in[0]), in[1]}, 1);
          return std::vector<int>{b.reduce(Prim::Sum, joined, {1}, true)};
        },
        {"torch.cat((x.sin(), y), 1).sum(1, keepdim=True)"}, {1e-5, 1e-5});
  check({"cube"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int split = b.view(b.binary(Prim::Mul, v(in[0]), f(2.0)), {6, 7, 3, 3});
          return std::vector<int>{b.binary(Prim::Add, v(b.permute(split, {0, 2, 1, 3})), f(1.0))};
        },
        {"(cube * 2).view(6, 7, 3, 3).permute(0, 2, 1, 3) + 1"});
}

TEST(CudaEmulated, SoftmaxThenLayerNormWithStatistics) {
  KILN_REQUIRE_HOST_COMPILER();
  check({"k4", "w4"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int max = b.reduce(Prim::Amax, in[0], {1}, true);
          const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, v(in[0]), v(max)));
          const int y = b.binary(Prim::Div, v(e), v(b.reduce(Prim::Sum, e, {1}, true)));
          auto [var, mean] = b.var_mean(y, {1}, 0, true);
          const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), f(1e-5)));
          const int out = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(y), v(mean))), v(rstd));
          return std::vector<int>{b.binary(Prim::Add, v(b.binary(Prim::Mul, v(out), v(in[1]))), f(0.5)), mean, rstd};
        },
        {"torch.nn.functional.layer_norm(torch.softmax(k4, 1), (4096,), w4, torch.full_like(w4, 0.5))",
         "torch.softmax(k4, 1).mean(1, keepdim=True)",
         "(torch.softmax(k4, 1).var(1, unbiased=False, keepdim=True) + 1e-5).rsqrt()"},
        {2e-4, 1e-5});
}

// A layer_norm backward's shape (Note [Recomputed kernel outputs]): the
// column kernel recomputes the float32 gradient from the bfloat16 one
// instead of reading what the row kernel stored.
TEST(CudaEmulated, RecomputedKernelOutputs) {
  KILN_REQUIRE_HOST_COMPILER();
  check({"v1", "bf", "row"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int gf = b.convert(in[1], graph::DType::Float32);
          const int scaled = b.binary(Prim::Mul, v(gf), v(in[2]));
          const int rows = b.reduce(Prim::Sum, b.binary(Prim::Mul, v(scaled), v(in[0])), {1}, true);
          const int columns = b.reduce(Prim::Sum, b.binary(Prim::Mul, v(gf), v(in[0])), {0}, false);
          return std::vector<int>{b.binary(Prim::Sub, v(scaled), v(rows)), columns};
        },
        {"bf.float() * row - (bf.float() * row * v1).sum(1, keepdim=True)", "(bf.float() * v1).sum(0)"},
        {1e-5, 1e-4}, 2, Rewrite::RecomputeOutputs);
}

// A graph of one kernel over named tensors, scheduled and lowered.
struct OneKernel {
  std::vector<PyRef> inputs;  // the named tensors, in order
  std::vector<int> ids;       // their value ids
  std::vector<int> outs;      // the graph's outputs
  LoweredKernel lowered;
};

// Builds the graph `build` makes over the named tensors and lowers its
// one kernel; false (a failure reported) when it has another number of
// kernels or they do not compute the graph's outputs in order.
bool lower_one_kernel(const std::vector<std::string>& names,
                      const std::function<std::vector<int>(PrimBuilder&, const std::vector<int>&)>& build,
                      OneKernel* out) {
  PyRef ns = tensors();
  PrimGraph graph;
  PrimBuilder builder(graph);
  for (const std::string& name : names) {
    out->inputs.push_back(test::item(ns, name.c_str()));
    graph::TensorMeta meta;
    runtime::read_tensor_meta(out->inputs.back().get(), &meta);
    out->ids.push_back(graph.add_input(meta));
  }
  out->outs = build(builder, out->ids);
  graph.set_outputs(out->outs);
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  EXPECT_EQ(groups.size(), 1u) << prims::format_prim_graph(graph);
  if (groups.size() != 1) return false;
  out->lowered = lower_group(graph, groups[0]);
  EXPECT_EQ(out->lowered.outputs, out->outs);  // each graph output is a kernel output, in order
  return out->lowered.outputs == out->outs;
}

// The kernel's arguments: its inputs' element pointers, then new outputs
// (filled with 77) appended to `outputs`. False (reported) on failure.
bool kernel_pointers(const OneKernel& one, std::vector<void*>* pointers, std::vector<PyRef>* outputs) {
  PyRef ns = tensors();
  for (int value : one.lowered.inputs) {
    const auto at = std::find(one.ids.begin(), one.ids.end(), value);
    EXPECT_NE(at, one.ids.end());
    if (at == one.ids.end()) return false;
    pointers->push_back(runtime::tensor_data(one.inputs[at - one.ids.begin()].get()));
  }
  const Kernel& kernel = one.lowered.kernel;
  for (const KernelOutput& out : kernel.outputs) {
    const std::string make = "torch.empty_strided(" + tuple_text(out.has_tensor_shape ? out.tensor_sizes : kernel.sizes) +
                             ", " + tuple_text(out.has_tensor_shape ? out.tensor_strides : out.strides) +
                             ", dtype=torch." + graph::dtype_name(out.dtype) + ").fill_(77)";
    outputs->push_back(PyRef::steal(PyRun_String(make.c_str(), Py_eval_input, ns.get(), ns.get())));
    EXPECT_TRUE(outputs->back()) << test::take_error();
    if (!outputs->back()) return false;
    pointers->push_back(runtime::tensor_data(outputs->back().get()));
  }
  return true;
}

// Like check, for a graph of one kernel: every launch configuration of
// launch_candidates (all compiled in one g++ run), scalar and vector
// entries, each compared with torch. Returns how many configurations ran.
size_t check_every_candidate(const std::vector<std::string>& names,
                             const std::function<std::vector<int>(PrimBuilder&, const std::vector<int>&)>& build,
                             const std::vector<std::string>& torch_exprs, Tolerance tol) {
  SCOPED_TRACE(torch_exprs.front());
  PyRef ns = tensors();
  OneKernel one;
  if (!lower_one_kernel(names, build, &one)) return 0;
  const Kernel& kernel = one.lowered.kernel;
  SCOPED_TRACE(format_kernel(kernel));
  const std::vector<LaunchConfig> candidates = launch_candidates(kernel);
  std::vector<CudaSource> sources;
  for (const LaunchConfig& config : candidates) sources.push_back(generate_cuda_source(kernel, config));
  std::string error;
  const std::vector<std::unique_ptr<test::HostKernel>> hosts = test::HostKernel::compile_all(sources, &error);
  EXPECT_EQ(hosts.size(), sources.size()) << error;
  if (hosts.size() != sources.size()) return 0;
  for (size_t c = 0; c < sources.size(); ++c) {
    const CudaSource& source = sources[c];
    SCOPED_TRACE(format_launch_config(source.config));
    for (bool vector : {false, true}) {
      if (vector && source.vector.name.empty()) continue;
      SCOPED_TRACE(vector ? "vector entry" : "scalar entry");
      std::vector<void*> pointers;
      std::vector<PyRef> outputs;
      if (!kernel_pointers(one, &pointers, &outputs)) return 0;
      // Three blocks at most: with more rows than that, the grid-stride
      // loop and (rows a block > 1) the rows past the last one run too.
      const CudaEntry& entry = vector ? source.vector : source.scalar;
      hosts[c]->run(vector, pointers.data(), static_cast<unsigned>(std::min<int64_t>(entry.grid, 3)),
                    static_cast<unsigned>(entry.block));
      for (size_t i = 0; i < one.outs.size(); ++i) {
        SCOPED_TRACE(torch_exprs[i]);
        expect_close(ns, outputs[i].get(), torch_exprs[i], tol);
      }
    }
  }
  return sources.size();
}

// Note [CUDA run-time layout]: the graph `build` makes over each set of
// named tensors (same inner sizes, other outer ones) lowers to one kernel
// whose run-time-layout source has the same text for every set, and
// `layout_sizes` run-time sizes; the first set's source, compiled once,
// then runs every set's kernel (its words, its grid), both entries, each
// compared with that set's torch expressions.
void check_one_source_for_all_sizes(
    const std::vector<std::vector<std::string>>& name_sets,
    const std::function<std::vector<int>(PrimBuilder&, const std::vector<int>&)>& build,
    const std::vector<std::vector<std::string>>& torch_exprs, Tolerance tol, int layout_sizes) {
  SCOPED_TRACE(torch_exprs.front().front());
  PyRef ns = tensors();
  std::vector<OneKernel> kernels(name_sets.size());
  std::vector<CudaSource> sources;
  for (size_t set = 0; set < name_sets.size(); ++set) {
    ASSERT_TRUE(lower_one_kernel(name_sets[set], build, &kernels[set]));
    const Kernel& kernel = kernels[set].lowered.kernel;
    LaunchConfig config = default_launch_config(kernel);
    config.runtime_layout = true;
    sources.push_back(generate_cuda_source(kernel, config));
    EXPECT_EQ(sources.back().text, sources.front().text) << format_kernel(kernel);
    // With constants the sources differ: what the test shares is real.
    if (set > 0) {
      EXPECT_NE(generate_cuda_source(kernel).text, generate_cuda_source(kernels[0].lowered.kernel).text);
    }
  }
  const CudaSource& source = sources.front();
  ASSERT_EQ(source.layout_sizes, layout_sizes) << source.text;
  std::string error;
  std::unique_ptr<test::HostKernel> host = test::HostKernel::compile(source, &error);
  ASSERT_TRUE(host) << error << "\n" << source.text;
  for (size_t set = 0; set < name_sets.size(); ++set) {
    const Kernel& kernel = kernels[set].lowered.kernel;
    SCOPED_TRACE(format_kernel(kernel));
    for (bool vector : {false, true}) {
      if (vector && source.vector.name.empty()) continue;
      SCOPED_TRACE(vector ? "vector entry" : "scalar entry");
      std::vector<void*> pointers;
      std::vector<PyRef> outputs;
      ASSERT_TRUE(kernel_pointers(kernels[set], &pointers, &outputs));
      // Its own words: from the source written for it (same text, its own
      // sizes, strides and size constants).
      std::vector<int64_t> words = layout_words(kernel, sources[set]);
      EXPECT_EQ(words.size(), layout_word_count(source, kernel));
      EXPECT_EQ(words.size(), source.layout_sizes + pointers.size() * source.layout_strides +
                                  source.runtime_constants.size());
      for (int64_t& word : words) pointers.push_back(&word);  // scalars: a pointer to the value, as CUDA takes them
      const CudaEntry& entry = vector ? source.vector : source.scalar;
      const int64_t grid = grid_for_rows(entry, kernel_rows(kernel));
      host->run(vector, pointers.data(), static_cast<unsigned>(std::min<int64_t>(grid, 3)),
                static_cast<unsigned>(entry.block));
      for (size_t i = 0; i < kernels[set].outs.size(); ++i) {
        SCOPED_TRACE(torch_exprs[set][i]);
        expect_close(ns, outputs[i].get(), torch_exprs[set][i], tol);
      }
    }
  }
}

// softmax of x over `dim`, as torch decomposes it.
int softmax(PrimBuilder& b, int x, int64_t dim = 1) {
  const int max = b.reduce(Prim::Amax, x, {dim}, true);
  const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, v(x), v(max)));
  return b.binary(Prim::Div, v(e), v(b.reduce(Prim::Sum, e, {dim}, true)));
}

// layer_norm over dim 1 of x with weight w and bias c, as torch decomposes it.
int layer_norm(PrimBuilder& b, int x, int w, int c) {
  auto [var, mean] = b.var_mean(x, {1}, 0, true);
  const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), f(1e-5)));
  const int out = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(x), v(mean))), v(rstd));
  return b.binary(Prim::Add, v(b.binary(Prim::Mul, v(out), v(w))), v(c));
}

TEST(CudaEmulated, EveryLaunchCandidateOfRowReductions) {
  KILN_REQUIRE_HOST_COMPILER();
  size_t configurations = 0;
  for (int64_t n : {1, 31, 100, 1000, 4096, 5000}) {
    SCOPED_TRACE("rows of " + std::to_string(n));
    const std::string x = "c" + std::to_string(n), w = "cw" + std::to_string(n), c = "cb" + std::to_string(n);
    const std::string ln_args = "(" + std::to_string(n) + ",), " + w + ", " + c;
    configurations += check_every_candidate(
        {x}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{softmax(b, in[0])}; },
        {"torch.softmax(" + x + ", 1)"}, {1e-5, 1e-6});
    configurations += check_every_candidate(
        {x, w, c},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{layer_norm(b, in[0], in[1], in[2])};
        },
        {"torch.nn.functional.layer_norm(" + x + ", " + ln_args + ")"}, {1e-4, 1e-5});
    configurations += check_every_candidate(
        {x, w, c},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{layer_norm(b, softmax(b, in[0]), in[1], in[2])};
        },
        {"torch.nn.functional.layer_norm(torch.softmax(" + x + ", 1), " + ln_args + ")"}, {2e-4, 1e-5});
    // sum and mean: one phase (the barrier after each combine stays).
    configurations += check_every_candidate(
        {x},
        [n](PrimBuilder& b, const std::vector<int>& in) {
          const int sum = b.reduce(Prim::Sum, in[0], {1}, false);
          return std::vector<int>{sum, b.binary(Prim::Div, v(b.reduce(Prim::Sum, in[0], {1}, true)),
                                                f(static_cast<double>(n)))};
        },
        {x + ".sum(1)", x + ".mean(1, keepdim=True)"}, {1e-5, 1e-4});
  }
  // Candidates beyond the defaults ran: a handful per kernel of 100 points
  // or more.
  EXPECT_GE(configurations, 60u);
}

TEST(CudaEmulated, OuterReductionsSplitOverThreads) {
  KILN_REQUIRE_HOST_COMPILER();
  // 45 columns of 2000 points, 8 threads each (lanes past column 44 store
  // nothing): sums, extremes, and softmax over dim 0 (a last pass).
  check({"tall"},
        [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{softmax(b, in[0], 0)}; },
        {"torch.softmax(tall, 0)"}, {1e-5, 1e-6});
  check({"tall"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false), b.reduce(Prim::Amin, in[0], {0}, true)};
        },
        {"tall.sum(0)", "tall.amin(0, keepdim=True)"}, {1e-5, 1e-5});
  // 37 columns of 4100 points: 32 threads each, unrolled loops with a
  // remainder; a two-phase reduction (softmax) too.
  check({"taller"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false), b.reduce(Prim::Amax, in[0], {0}, true)};
        },
        {"taller.sum(0)", "taller.amax(0, keepdim=True)"}, {1e-4, 1e-5});
  check({"taller"},
        [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{softmax(b, in[0], 0)}; },
        {"torch.softmax(taller, 0)"}, {1e-5, 1e-6});
}

// Phase 1 stores an output that reads no reduction (Note [CUDA kernels]):
// GELU's result beside its column sum (a tile row, split over threads),
// and beside its row sum (warp rows, scalar and vector entries).
TEST(CudaEmulated, OutputsBesideTheirReductionsAreStoredByPhaseOne) {
  KILN_REQUIRE_HOST_COMPILER();
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE(dim);
    check({"tall"},
          [dim](PrimBuilder& b, const std::vector<int>& in) {
            const int g = gelu(b, in[0]);
            return std::vector<int>{g, b.reduce(Prim::Sum, g, {dim}, false)};
          },
          {"torch.nn.functional.gelu(tall)", "torch.nn.functional.gelu(tall).sum(" + std::to_string(dim) + ")"},
          {1e-5, 1e-4});
  }
}

// Note [Vector tiles]: lanes of 4 floats or 8 bfloat16s, with partial row
// groups (50 lanes: a second block of 18), a kept dim before the tile, two
// phases and a last pass (softmax over dim 0), broadcast inputs read per
// reduced point, and outputs beside their column sums.
TEST(CudaEmulated, VectorTilesMatchTorch) {
  KILN_REQUIRE_HOST_COMPILER();
  const size_t vectors_before = vector_entries_run;
  check({"wide"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false), b.reduce(Prim::Amax, in[0], {0}, true)};
        },
        {"wide.sum(0)", "wide.amax(0, keepdim=True)"}, {1e-4, 1e-5});
  check({"wide"},
        [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{softmax(b, in[0], 0)}; },
        {"torch.softmax(wide, 0)"}, {1e-5, 1e-6});
  check({"split3"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Sum, in[0], {1}, false)};
        },
        {"split3.sum(1)"}, {1e-4, 1e-5});
  check({"wbf"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int g = gelu(b, b.convert(in[0], DType::Float32));
          return std::vector<int>{b.convert(g, DType::BFloat16), b.reduce(Prim::Sum, g, {0}, false)};
        },
        {"torch.nn.functional.gelu(wbf.float()).bfloat16()", "torch.nn.functional.gelu(wbf.float()).sum(0)"},
        {1e-2, 1e-3});
  // dx-like output g * w * rstd beside the weight and bias gradients'
  // column sums sum(g * xhat) and sum(g).
  check({"lnx", "lng", "lnm", "lnr", "lnw"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int g = b.convert(in[1], DType::Float32);
          const int xhat = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(in[0]), v(in[2]))), v(in[3]));
          const int dx = b.binary(Prim::Mul, v(b.binary(Prim::Mul, v(g), v(in[4]))), v(in[3]));
          const int weight_grad = b.reduce(Prim::Sum, b.binary(Prim::Mul, v(g), v(xhat)), {0}, false);
          return std::vector<int>{b.convert(dx, DType::BFloat16), weight_grad, b.reduce(Prim::Sum, g, {0}, false)};
        },
        {"(lng.float() * lnw * lnr).bfloat16()", "(lng.float() * ((lnx - lnm) * lnr)).sum(0)", "lng.float().sum(0)"},
        {1e-4, 1e-4});
  EXPECT_EQ(vector_entries_run - vectors_before, 5u);  // every kernel above has a vector entry
}

// argmax/argmin (Note [Reduction lowering]): the extreme, then the smallest
// index where it occurs, an Index expression over the reduced dims, in
// every row mode: warp rows (looped, persistent), block rows, tiles split
// over threads (scalar and vector), a middle dim, a full reduction; ties
// and NaNs as torch (first occurrence, first NaN).
TEST(CudaEmulated, ArgmaxAndArgminInEveryRowMode) {
  KILN_REQUIRE_HOST_COMPILER();
  const size_t vectors_before = vector_entries_run;
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"big", 1}, {"big", 0}, {"d100", 1}, {"k5", 1}, {"cube", 1}, {"nan", 1}, {"nan", 0},
      {"tall", 0}, {"wide", 0}, {"ties", 0}, {"ties", 1}, {"big", -1}, {"i64", 1}};
  for (Prim prim : {Prim::Argmax, Prim::Argmin}) {
    const std::string op = prim == Prim::Argmax ? "argmax" : "argmin";
    for (const auto& [name, dim] : cases) {
      const std::string dims = dim < 0 ? "None" : std::to_string(dim);
      check({name},
            [&, dim = dim](PrimBuilder& b, const std::vector<int>& in) {
              return std::vector<int>{
                  b.reduce(prim, in[0], dim < 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim}, false)};
            },
            {"torch." + op + "(" + name + ", " + dims + ")"});
    }
  }
  EXPECT_GT(vector_entries_run, vectors_before);  // some ran a vector entry (wide: a vector tile)
}

TEST(CudaEmulated, VarMeanOverOuterDimsWithCorrection) {
  KILN_REQUIRE_HOST_COMPILER();
  check({"big"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          auto [var, mean] = b.var_mean(in[0], {0}, 1, false);
          return std::vector<int>{var, mean};
        },
        {"big.var(0)", "big.mean(0)"}, {1e-5, 1e-6});
}

// Note [CUDA run-time layout]: a pointwise kernel (a per-length bias
// broadcast over the batch: its zero stride stays a constant) and a
// softmax over rows of 40 (warp rows, several a block, the last block
// part full) share one source over [6, 7, 40] and [3, 11, 40]; a reduction
// with a tile dim keeps its constants.
TEST(CudaEmulated, RunTimeLayoutsShareOneSourceAcrossSizes) {
  KILN_REQUIRE_HOST_COMPILER();
  auto biased = [](PrimBuilder& b, const std::vector<int>& in) {
    return b.binary(Prim::Add, v(b.binary(Prim::Mul, v(in[0]), v(in[2]))), v(in[1]));
  };
  check_one_source_for_all_sizes(
      {{"ra", "za", "rw"}, {"rb", "zb", "rw"}},
      [&](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{gelu(b, biased(b, in))}; },
      {{"torch.nn.functional.gelu(ra * rw + za)"}, {"torch.nn.functional.gelu(rb * rw + zb)"}}, {1e-6, 1e-6}, 3);
  check_one_source_for_all_sizes(
      {{"ra", "za", "rw"}, {"rb", "zb", "rw"}},
      [&](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{softmax(b, biased(b, in), 2)}; },
      {{"torch.softmax(ra * rw + za, 2)"}, {"torch.softmax(rb * rw + zb, 2)"}}, {1e-5, 1e-6}, 2);
  // An attention bias padded to a multiple of 16 keys: the mask piece of
  // the cat ends at the key length, a size constant taken as an argument.
  auto padded_bias = [](PrimBuilder& b, const std::vector<int>& in) {
    const int64_t keys = b.meta(in[0]).sizes.back();
    const int fill = b.full({2, 3, 16 - keys % 16}, Scalar::of_int(0), DType::Bool);
    return std::vector<int>{b.where(b.cat({in[0], fill}, 2), f(0.0), f(-1e30))};
  };
  auto padded_expr = [](const std::string& m) {
    return "torch.where(torch.cat([" + m + ", torch.zeros(2, 3, 16 - " + m + ".shape[-1] % 16, dtype=torch.bool)], 2), "
           "0.0, -1e30)";
  };
  check_one_source_for_all_sizes({{"pm45"}, {"pm38"}, {"pm20"}}, padded_bias,
                                 {{padded_expr("pm45")}, {padded_expr("pm38")}, {padded_expr("pm20")}}, {}, 2);
  {
    OneKernel one;
    ASSERT_TRUE(lower_one_kernel({"pm45"}, padded_bias, &one));
    LaunchConfig config = default_launch_config(one.lowered.kernel);
    config.runtime_layout = true;
    const CudaSource source = generate_cuda_source(one.lowered.kernel, config);
    ASSERT_GE(source.runtime_constants.size(), 2u) << source.text;  // the key length and the last key
    EXPECT_NE(source.text.find("const long long kiln_size0"), std::string::npos) << source.text;
    EXPECT_EQ(source.text.find("45LL"), std::string::npos) << source.text;  // no bound compiled in
  }
  for (const char* x : {"ra", "rb"}) {
    OneKernel one;
    ASSERT_TRUE(lower_one_kernel(
        {x}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Sum, in[0], {1}, false)}; },
        &one));
    LaunchConfig config = default_launch_config(one.lowered.kernel);
    config.runtime_layout = true;
    const CudaSource source = generate_cuda_source(one.lowered.kernel, config);
    EXPECT_GE(tile_dim(one.lowered.kernel), 0);
    EXPECT_EQ(source.layout_sizes + source.layout_strides, 0) << source.text;
    EXPECT_EQ(source.text, generate_cuda_source(one.lowered.kernel).text);
  }
}

}  // namespace
}  // namespace kiln::inductor::cuda
