#include "interpreter/graph_callable.h"

#include "interpreter/compile_config.h"

namespace kiln::interpreter {
namespace {

struct GraphCallable {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  std::shared_ptr<CompiledGraph> compiled;
};

PyObject* graph_callable_vectorcall(PyObject* self_obj, PyObject* const* args, size_t nargsf,
                                    PyObject* kwnames) {
  auto* self = reinterpret_cast<GraphCallable*>(self_obj);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const auto expected = static_cast<Py_ssize_t>(self->compiled->graph->inputs().size());
  if (kwnames || nargs != expected) {
    PyErr_Format(PyExc_TypeError, "kiln graph takes %zd positional inputs, got %zd%s", expected,
                 nargs, kwnames ? " and keywords" : "");
    return nullptr;
  }
  // torch's own Python code inside the graph must not be traced.
  GraphRunScope untraced;
  return self->compiled->executor->run(args);
}

void graph_callable_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<GraphCallable*>(self_obj);
  self->compiled.~shared_ptr<CompiledGraph>();
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* graph_callable_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<GraphCallable*>(self_obj);
  return PyUnicode_FromFormat("<kiln graph: %d ops>", self->compiled->graph->call_count());
}

PyTypeObject* graph_callable_type() {
  static PyTypeObject type = [] {
    PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = "kiln.GraphCallable";
    t.tp_basicsize = sizeof(GraphCallable);
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    t.tp_dealloc = graph_callable_dealloc;
    t.tp_call = PyVectorcall_Call;
    t.tp_vectorcall_offset = offsetof(GraphCallable, vectorcall);
    t.tp_repr = graph_callable_repr;
    return t;
  }();
  static bool ready = PyType_Ready(&type) == 0;
  return ready ? &type : nullptr;
}

}  // namespace

PyObject* make_graph_callable(std::shared_ptr<CompiledGraph> compiled) {
  PyTypeObject* type = graph_callable_type();
  if (!type) return nullptr;
  auto* self = PyObject_New(GraphCallable, type);
  if (!self) return nullptr;
  self->vectorcall = graph_callable_vectorcall;
  new (&self->compiled) std::shared_ptr<CompiledGraph>(std::move(compiled));
  return reinterpret_cast<PyObject*>(self);
}

}  // namespace kiln::interpreter
