// Helpers for the prims tests: a Python namespace holding a zoo of input
// tensors (contiguous, transposed, sliced, expanded, 0-dim, size-0, channels
// last, every dtype), running torch expressions that may raise, and
// comparing kiln's meta rules with torch's results.
#pragma once

#include <Python.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/tensor_meta.h"
#include "prims/prim_error.h"
#include "runtime/aten_bridge.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::prims::test {

using graph::TensorMeta;
using kiln::test::PyRef;

// Python source defining the zoo. Names: <dtype><shape><layout>, e.g.
// f23t is a transposed float32 [2, 3]; layouts: t transposed, s sliced with
// a step, e expanded (stride 0), p permuted, cl channels_last, g requires grad.
inline const char* kZooSource = R"PY(
import torch
torch.manual_seed(0)
DTYPES = {'b': torch.bool, 'u8': torch.uint8, 'i8': torch.int8, 'i16': torch.int16,
          'i32': torch.int32, 'i64': torch.int64, 'f16': torch.float16, 'bf16': torch.bfloat16,
          'f32': torch.float32, 'f64': torch.float64, 'c64': torch.complex64,
          'c128': torch.complex128}
def make(shape, dtype=torch.float32):
    return (torch.rand(shape) * 3 + 1).to(dtype)
f23 = make((2, 3)); f23t = make((3, 2)).t(); f23s = make((2, 6))[:, ::2]
f23e = make(3).expand(2, 3); f3 = make(3); f13 = make((1, 3)); f21 = make((2, 1))
f1 = make(1); f4 = make(4); f0 = make(()); f03 = make((0, 3)); f30t = make((0, 3)).t()
f234 = make((2, 3, 4)); f234p = make((4, 2, 3)).permute(1, 2, 0)
f234s = make((2, 3, 8))[..., 1::2]; f214 = make((2, 1, 4)); f314p = make((3, 1, 4)).permute(1, 0, 2)
f2345 = make((2, 3, 4, 5)); f2345cl = f2345.contiguous(memory_format=torch.channels_last)
f1345cl = make((1, 3, 4, 5)).contiguous(memory_format=torch.channels_last)
f2315cl = make((2, 3, 1, 5)).contiguous(memory_format=torch.channels_last)
f23456cl = make((2, 3, 4, 5, 6)).contiguous(memory_format=torch.channels_last_3d)
f23g = make((2, 3)).requires_grad_(); f0g = make(()).requires_grad_()
f1e = make(()).expand(1, 1); f2e3 = make((2, 1)).expand(2, 3)
for _name, _dtype in DTYPES.items():
    globals()[_name + '_3'] = make(3, _dtype)
    globals()[_name + '_0'] = make((), _dtype)
)PY";

// The names of the float32 zoo tensors covering every layout.
inline const std::vector<std::string>& layout_zoo() {
  static const std::vector<std::string> names = {
      "f23",  "f23t", "f23s",   "f23e",    "f3",      "f13",      "f21",     "f1",
      "f4",   "f0",   "f03",    "f30t",    "f234",    "f234p",    "f234s",   "f214",
      "f314p", "f2345", "f2345cl", "f1345cl", "f2315cl", "f23456cl", "f23g",   "f0g",
      "f1e",  "f2e3"};
  return names;
}

// Short names of the dtypes in the zoo, in promotion-table order.
inline const std::vector<std::string>& dtype_zoo() {
  static const std::vector<std::string> names = {"b",   "u8",   "i8",  "i16", "i32", "i64",
                                                 "f16", "bf16", "f32", "f64", "c64", "c128"};
  return names;
}

// The namespace the zoo lives in (created once).
inline PyObject* zoo_namespace() {
  static PyObject* globals = [] {
    PyObject* dict = PyDict_New();
    PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins());
    PyObject* result = PyRun_String(kZooSource, Py_file_input, dict, dict);
    if (result == nullptr) ADD_FAILURE() << "zoo setup failed: " << kiln::test::take_error();
    Py_XDECREF(result);
    return dict;
  }();
  return globals;
}

// Runs Python statements in the zoo namespace (a test failure when they raise).
inline void exec_in_zoo(const std::string& source) {
  PyObject* result = PyRun_String(source.c_str(), Py_file_input, zoo_namespace(), zoo_namespace());
  if (result == nullptr) ADD_FAILURE() << "failed:\n" << source << "\n" << kiln::test::take_error();
  Py_XDECREF(result);
}

// Evaluates an int-valued expression in the zoo namespace.
inline long zoo_int(const std::string& expression) {
  PyObject* value = PyRun_String(expression.c_str(), Py_eval_input, zoo_namespace(), zoo_namespace());
  if (value == nullptr) {
    ADD_FAILURE() << expression << ": " << kiln::test::take_error();
    return 0;
  }
  const long result = PyLong_AsLong(value);
  Py_DECREF(value);
  return result;
}

// A torch expression's outcome: a value, or the "Type: message" it raised.
struct Outcome {
  PyRef value;
  std::string error;  // empty when the expression returned
  bool raised() const { return !error.empty(); }
};

// Evaluates `expression` in the zoo namespace; exceptions are captured, not test failures.
inline Outcome run_torch(const std::string& expression) {
  PyObject* value = PyRun_String(expression.c_str(), Py_eval_input, zoo_namespace(), zoo_namespace());
  if (value == nullptr) return {PyRef(), kiln::test::take_error()};
  return {PyRef::steal(value), ""};
}

// The metadata of the zoo tensor or tensor expression `expression` (a test
// failure when it does not evaluate to a tensor).
inline TensorMeta meta_of(const std::string& expression) {
  // Zoo tensors never change, so their metadata is read once.
  static std::map<std::string, TensorMeta> cache;
  if (auto it = cache.find(expression); it != cache.end()) return it->second;
  TensorMeta meta;
  Outcome outcome = run_torch(expression);
  if (outcome.raised() || !runtime::is_tensor(outcome.value.get())) {
    ADD_FAILURE() << "`" << expression << "` is not a tensor: " << outcome.error;
    return meta;
  }
  runtime::read_tensor_meta(outcome.value.get(), &meta);
  cache.emplace(expression, meta);
  return meta;
}

// The number of elements of a zoo tensor.
inline int64_t numel_of(const std::string& expression) {
  int64_t n = 1;
  for (int64_t s : meta_of(expression).sizes) n *= s;
  return n;
}

// Metadata as a test message shows it, strides always included.
inline std::string describe(const TensorMeta& m) {
  return std::string(graph::dtype_short_name(m.dtype)) + format_shape(m.sizes) + " strides " +
         format_shape(m.strides) + " " + graph::device_name(m.device_type, m.device_index) +
         (m.requires_grad ? " grad" : "");
}

// Tallies of one comparison table, so a test can assert it covered both outcomes.
// Torch builds a C++ backtrace for every error it raises (about 6 ms on the
// dev machine), so large tables confirm only every n-th error kiln predicts;
// a case kiln accepts is always compared.
struct Tally {
  int agreed_results = 0;
  int agreed_errors = 0;
  int skipped = 0;
  int confirm_every = 1;
  int predicted_errors = 0;
};

// True when torch's error says only that its CPU kernels lack a dtype (Half,
// BFloat16 and complex coverage differs between torch versions), or that the Python
// binding takes no Python scalar there: neither is a rule kiln models.
inline bool is_coverage_gap(const std::string& error) {
  return (error.find("not implemented for 'Half'") != std::string::npos ||
          error.find("not implemented for 'BFloat16'") != std::string::npos ||
          error.find("not implemented for 'ComplexHalf'") != std::string::npos ||
          error.find("not implemented for 'ComplexFloat'") != std::string::npos ||
          error.find("not implemented for 'ComplexDouble'") != std::string::npos ||
          error.rfind("TypeError", 0) == 0);
}

// Runs kiln's rule and torch's expression and checks they agree: both raise,
// or both produce the same metadata (each output of a tuple in order).
inline void expect_agree(const std::string& torch_expression,
                         const std::function<std::vector<TensorMeta>()>& kiln_rule, Tally* tally) {
  std::vector<TensorMeta> kiln;
  std::string kiln_error;
  try {
    kiln = kiln_rule();
  } catch (const PrimError& e) {
    kiln_error = e.what();
    if (tally->predicted_errors++ % tally->confirm_every != 0) {
      ++tally->skipped;
      return;
    }
  }
  Outcome torch = run_torch(torch_expression);
  if (torch.raised()) {
    if (!kiln_error.empty()) {
      ++tally->agreed_errors;
    } else if (is_coverage_gap(torch.error)) {
      ++tally->skipped;
    } else {
      ADD_FAILURE() << torch_expression << ": torch raised " << torch.error
                    << " but kiln gave " << describe(kiln.front());
    }
    return;
  }
  if (!kiln_error.empty()) {
    // kiln refuses dtypes it does not model (complex32) where torch computes.
    if (kiln_error.find("which kiln does not model") != std::string::npos) {
      ++tally->skipped;
      return;
    }
    ADD_FAILURE() << torch_expression << ": kiln raised `" << kiln_error << "` but torch returned "
                  << kiln::test::repr_of(torch.value.get());
    return;
  }
  std::vector<PyObject*> results;
  if (PyTuple_Check(torch.value.get())) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(torch.value.get()); ++i) {
      results.push_back(PyTuple_GET_ITEM(torch.value.get(), i));
    }
  } else {
    results.push_back(torch.value.get());
  }
  ASSERT_EQ(results.size(), kiln.size()) << torch_expression;
  for (size_t i = 0; i < results.size(); ++i) {
    TensorMeta expected;
    runtime::read_tensor_meta(results[i], &expected);
    EXPECT_EQ(describe(kiln[i]), describe(expected)) << torch_expression;
  }
  ++tally->agreed_results;
}

// expect_agree for a rule with one output.
inline void expect_agree1(const std::string& torch_expression,
                          const std::function<TensorMeta()>& kiln_rule, Tally* tally) {
  expect_agree(torch_expression, [&] { return std::vector<TensorMeta>{kiln_rule()}; }, tally);
}

// Expects kiln's rule to raise PrimError with `fragment` in its message.
template <typename Rule>
void expect_prim_error(Rule&& rule, const std::string& fragment) {
  try {
    rule();
    ADD_FAILURE() << "expected PrimError containing `" << fragment << "`";
  } catch (const PrimError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// Joins shapes/dims as a Python tuple literal: {2, 3} -> "(2, 3)", {2} -> "(2,)".
inline std::string py_tuple(const std::vector<int64_t>& values) {
  std::string text = "(";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + (values.size() == 1 ? ",)" : ")");
}

}  // namespace kiln::prims::test
