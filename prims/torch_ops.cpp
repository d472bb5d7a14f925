#include "prims/torch_ops.h"

#include <string_view>
#include <unordered_map>

#include "base/log.h"

namespace kiln::prims {
namespace {

struct OpEntry {
  TorchOp op;
  const char* name;
  std::vector<const char*> spellings;
};

const std::vector<OpEntry>& op_entries() {
  static const std::vector<OpEntry> entries = {
#define KILN_TORCH_OP_ENTRY(name, ...) {TorchOp::name, #name, {__VA_ARGS__}},
      KILN_TORCH_OPS(KILN_TORCH_OP_ENTRY)
#undef KILN_TORCH_OP_ENTRY
  };
  return entries;
}

std::string trim(std::string_view text) {
  size_t start = text.find_first_not_of(' ');
  size_t end = text.find_last_not_of(' ');
  if (start == std::string_view::npos) return "";
  return std::string(text.substr(start, end - start + 1));
}

// The module or type a spelling's prefix names (borrowed, kept for the
// process), or null.
PyObject* owner_of(const std::string& prefix) {
  static PyObject* torch = PyImport_ImportModule("torch");
  static PyObject* functional = PyImport_ImportModule("torch.nn.functional");
  static PyObject* linalg = PyImport_ImportModule("torch.linalg");
  static PyObject* operator_module = PyImport_ImportModule("operator");
  static PyObject* builtins = PyImport_ImportModule("builtins");
  static PyObject* tensor = torch ? PyObject_GetAttrString(torch, "Tensor") : nullptr;
  if (prefix == "torch") return torch;
  if (prefix == "F") return functional;
  if (prefix == "linalg") return linalg;
  if (prefix == "operator") return operator_module;
  if (prefix == "builtins") return builtins;
  if (prefix == "Tensor") return tensor;
  return nullptr;
}

// Evaluates a default's Python literal (kept for the process).
PyObject* literal(const std::string& text) {
  static PyObject* globals = [] {
    PyObject* dict = PyDict_New();
    PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins());
    return dict;
  }();
  PyObject* value = PyRun_String(text.c_str(), Py_eval_input, globals, globals);
  if (!value) PyErr_Clear();
  return value;
}

// Parses "prefix.name(a, b=1, *, c=None)" into a spelling; false when the
// callable does not exist in this torch.
bool parse_spelling(TorchOp op, const char* text, PyObject** callable, OpSpelling* out) {
  const std::string_view spec(text);
  const size_t open = spec.find('(');
  const std::string qualified(spec.substr(0, open));
  const size_t dot = qualified.find('.');
  PyObject* owner = owner_of(qualified.substr(0, dot));
  if (!owner) return false;
  *callable = PyObject_GetAttrString(owner, qualified.substr(dot + 1).c_str());
  if (!*callable) {
    PyErr_Clear();
    return false;
  }
  out->op = op;
  out->text = qualified;
  std::string_view body = spec.substr(open + 1, spec.rfind(')') - open - 1);
  bool keyword_only = false;
  // Split on commas outside quotes and brackets.
  size_t start = 0;
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    const char c = i < body.size() ? body[i] : ',';
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c != ',' || depth > 0) continue;
    std::string item = trim(body.substr(start, i - start));
    start = i + 1;
    if (item.empty()) continue;
    if (item == "*") {
      keyword_only = true;
      continue;
    }
    Param param;
    param.keyword_only = keyword_only;
    if (item[0] == '*') {
      param.varargs = true;
      item = item.substr(1);
    }
    const size_t eq = item.find('=');
    param.name = trim(item.substr(0, eq));
    if (eq != std::string::npos) param.default_value = literal(trim(item.substr(eq + 1)));
    out->params.push_back(std::move(param));
  }
  return true;
}

std::unordered_map<PyObject*, OpSpelling>& spelling_table() {
  static std::unordered_map<PyObject*, OpSpelling> table = [] {
    std::unordered_map<PyObject*, OpSpelling> built;
    int skipped = 0;
    for (const OpEntry& entry : op_entries()) {
      for (const char* text : entry.spellings) {
        PyObject* callable = nullptr;  // kept (a new reference) for the process
        OpSpelling spelling;
        if (!parse_spelling(entry.op, text, &callable, &spelling)) {
          ++skipped;
          continue;
        }
        if (!built.emplace(callable, std::move(spelling)).second) Py_DECREF(callable);
      }
    }
    KILN_LOG(prims, "decomposition table: " << built.size() << " callables, " << skipped
                                            << " spellings absent from this torch");
    return built;
  }();
  return table;
}

}  // namespace

const char* torch_op_name(TorchOp op) {
  static const char* const names[] = {
#define KILN_TORCH_OP_NAME(name, ...) #name,
      KILN_TORCH_OPS(KILN_TORCH_OP_NAME)
#undef KILN_TORCH_OP_NAME
  };
  return names[static_cast<int>(op)];
}

const OpSpelling* find_torch_op(PyObject* callable) {
  auto& table = spelling_table();
  auto it = table.find(callable);
  return it == table.end() ? nullptr : &it->second;
}

bool bind_args(const OpSpelling& spelling, const std::vector<graph::Arg>& args,
               const std::vector<std::pair<std::string, graph::Arg>>& kwargs, BoundArgs* out,
               std::string* why) {
  const auto& params = spelling.params;
  out->given.assign(params.size(), nullptr);
  out->rest.clear();
  size_t next = 0;
  for (const graph::Arg& arg : args) {
    while (next < params.size() && params[next].keyword_only) ++next;
    if (next >= params.size()) {
      *why = spelling.text + ": too many positional arguments";
      return false;
    }
    if (params[next].varargs) {
      out->rest.push_back(&arg);
      continue;
    }
    out->given[next++] = &arg;
  }
  for (const auto& [name, arg] : kwargs) {
    bool found = false;
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].name != name) continue;
      // A varargs parameter given by keyword holds the whole sequence
      // (x.new_ones(size=(2, 3)), x.permute(dims=(1, 0))).
      if (params[i].varargs) {
        if (!out->rest.empty()) {
          *why = spelling.text + ": " + name + " given twice";
          return false;
        }
        out->rest.push_back(&arg);
        found = true;
        continue;
      }
      if (out->given[i]) {
        *why = spelling.text + ": " + name + " given twice";
        return false;
      }
      out->given[i] = &arg;
      found = true;
    }
    if (!found) {
      *why = spelling.text + ": keyword " + name + " is not modelled";
      return false;
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!out->given[i] && !params[i].varargs && !params[i].default_value) {
      *why = spelling.text + ": argument " + params[i].name + " missing";
      return false;
    }
  }
  return true;
}

}  // namespace kiln::prims
