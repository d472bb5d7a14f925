// try/except/finally: which instructions a user's handler protects (Note
// [Tracing try blocks]), and exceptions raised and caught inside inlined
// frames (Note [Exceptions in inlined frames]).
#include <cstring>

#include "cpython/exception_table.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

// Note [Tracing try blocks]
// CPython 3.11+ reaches a handler only through the exception table, never
// by a jump, so the tracer follows the path on which nothing raises: the
// protected body, then the code after it (a `finally` body is compiled
// inline on that path too). When the body does not raise while tracing,
// the handler is dead code for this trace.
//
// Where the trace stops inside a protected body, a graph break is not
// made: the transformed code would run the instruction outside the try, so
// an exception it raises would skip the user's handler. The frame runs
// eagerly instead (with the reason), which keeps the handler's semantics.
// A trace that stops because the body raises (a KeyError of a dict lookup,
// an op that fails on its fake tensors) therefore also runs the frame
// eagerly, and the handler runs as written. A try inside an inlined callee
// needs nothing more: if the callee's trace stops, the break is made at
// the caller's call instruction and CPython runs the whole call.
//
// What the graph cannot give: an op that passes on meta tensors but fails
// on real data (a cholesky of a matrix that is not positive definite)
// raises out of the compiled graph, where the handler does not see it.
// Handlers for such data-dependent failures need the frame to run eagerly
// (kiln.disable).
//
// Handlers of with-blocks (PUSH_EXC_INFO then WITH_EXCEPT_START) are not
// user handlers: traced with-blocks restore their state in the graph.

namespace {

// Decodes the frame's co_exceptiontable; false when it cannot be read.
bool read_exception_table(PyCodeObject* code, std::vector<cpython::ExceptionTableEntry>* entries) {
  PyRef table = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_exceptiontable"));
  if (!table || !PyBytes_Check(table.get())) {
    PyErr_Clear();
    return false;
  }
  return cpython::decode_exception_table(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table.get())),
                                             static_cast<size_t>(PyBytes_GET_SIZE(table.get())), entries);
}

// The index of the instruction at code unit `unit` (instructions.size() if none).
size_t instruction_at_unit(const std::vector<cpython::Instruction>& instructions, int unit) {
  size_t k = 0;
  while (k < instructions.size() && instructions[k].offset < 2 * unit) ++k;
  return k;
}

// A with-block's exit handler (PUSH_EXC_INFO then WITH_EXCEPT_START): it
// calls __exit__ with the exception, which no user handler is.
bool is_with_exit(const std::vector<cpython::Instruction>& instructions, size_t handler) {
  return handler + 1 < instructions.size() && instructions[handler].op == cpython::Op::PushExcInfo &&
         instructions[handler + 1].op == cpython::Op::WithExceptStart;
}

// "Type: message", on one line.
std::string describe_exception(PyObject* exception) {
  std::string out = Py_TYPE(exception)->tp_name;
  PyRef text = PyRef::steal(PyObject_Str(exception));
  if (text && PyUnicode_Check(text.get())) {
    const char* utf8 = PyUnicode_AsUTF8(text.get());
    if (utf8 && *utf8) out += std::string(": ") + utf8;
  }
  PyErr_Clear();
  const size_t newline = out.find('\n');
  return newline == std::string::npos ? out : out.substr(0, newline);
}

}  // namespace

std::vector<bool> user_try_coverage(PyCodeObject* code, const std::vector<cpython::Instruction>& instructions) {
  std::vector<bool> covered(instructions.size(), false);
  std::vector<cpython::ExceptionTableEntry> entries;
  if (!read_exception_table(code, &entries)) {
    // Unreadable: treat every instruction as protected (no breaks, ever).
    covered.assign(instructions.size(), true);
    return covered;
  }
  for (const auto& entry : entries) {
    // The handler's first instruction says what kind of handler it is.
    const size_t handler = instruction_at_unit(instructions, entry.target);
    if (handler >= instructions.size()) continue;
    if (instructions[handler].op != cpython::Op::PushExcInfo || is_with_exit(instructions, handler)) continue;
    for (size_t k = 0; k < instructions.size(); ++k) {
      const int unit = instructions[k].offset / 2;
      if (unit >= entry.start && unit < entry.end) covered[k] = true;
    }
  }
  return covered;
}

// Note [Exceptions in inlined frames]
// Library code asks questions by trying: `try: return
// torch.cuda.is_current_stream_capturing() except Exception: return False`,
// `getattr(config, name)` in a try, a dict lookup caught as KeyError. When
// the traced code raises exactly as eager Python would, because what raised
// depends only on values the trace guards or holds fixed (an attribute
// missing from a guarded object, with a guard that it stays missing; a call
// on Python constants; a KeyError of a dict whose keys are guarded; a
// `raise` statement), the tracer throws a PythonRaise carrying the real
// exception. Each inlined frame's run loop looks the raising instruction up
// in its exception table as CPython would: the stack is cut to the entry's
// depth, the offset pushed if the entry says lasti, then the exception, and
// tracing goes on at the handler. PUSH_EXC_INFO, CHECK_EXC_MATCH,
// POP_EXCEPT, RERAISE and RAISE_VARARGS are modelled on those values (the
// handled exception, sys.exception(), lives in the TraceState); a frame
// without a matching entry passes the exception to its caller's call
// instruction. The top frame handles none: a break inside a handler would
// need the resume function to re-enter it, so there a raise stops the trace
// as before (Note [Tracing try blocks]). An exception leaving a with-block
// stops the trace too: the block's __exit__ (a grad mode or autocast
// restore) is not run on that path. A fake-tensor op that raises is not
// exact (the real op may not) and stays a plain TraceAbort.
void raise_python_error(const std::string& prefix) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (!type) abort_trace(BreakCode::PythonException, prefix + "unknown error");
  PyErr_NormalizeException(&type, &value, &traceback);
  PyRef exception = PyRef::steal(value);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  if (!exception) abort_trace(BreakCode::PythonException, prefix + "unknown error");
  const std::string message = prefix + describe_exception(exception.get());
  throw PythonRaise(message, std::move(exception));
}

bool exception_class_is_builtin_made(PyObject* cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  PyRef init_name = PyRef::steal(PyUnicode_InternFromString("__init__"));
  PyRef new_name = PyRef::steal(PyUnicode_InternFromString("__new__"));
  PyObject* init = _PyType_Lookup(type, init_name.get());
  PyObject* made = _PyType_Lookup(type, new_name.get());
  return !(init && PyFunction_Check(init)) && !(made && PyFunction_Check(made));
}

void raise_exception_object(PyObject* exception) {
  throw PythonRaise(describe_exception(exception), PyRef::borrow(exception));
}

bool FrameTracer::enter_handler(const PythonRaise& raised) {
  if (is_top_ || pc_ == 0) return false;
  if (!exception_entries_read_) {
    exception_entries_read_ = true;
    if (!read_exception_table(code_, &exception_entries_)) exception_entries_.clear();
  }
  const size_t at = pc_ - 1;
  const int unit = instructions_[at].offset / 2;
  for (const auto& entry : exception_entries_) {
    if (unit < entry.start || unit >= entry.end) continue;
    const size_t handler = instruction_at_unit(instructions_, entry.target);
    if (handler >= instructions_.size() || stack_.size() < static_cast<size_t>(entry.depth)) return false;
    if (is_with_exit(instructions_, handler)) {
      abort_trace(BreakCode::PythonException,
                  std::string(raised.what()) + " (it leaves a with-block, whose __exit__ kiln does not trace "
                                               "on exceptions)");
    }
    stack_.resize(entry.depth);
    if (entry.lasti) {
      PyRef offset = PyRef::steal(PyLong_FromLong(unit));
      push(state_.wrap_unguarded(offset.get()));
    }
    push(state_.wrap_unguarded(raised.exception.get()));
    pc_ = handler;
    return true;
  }
  return false;
}

void FrameTracer::step_exceptions(const cpython::Instruction& ins) {
  using cpython::Op;
  switch (ins.op) {
    case Op::PushExcInfo: {
      ValuePtr exception = pop();
      push(state_.handled_exception ? state_.handled_exception : state_.wrap_unguarded(Py_None));
      push(exception);
      state_.handled_exception = exception;
      return;
    }
    case Op::PopExcept: {
      ValuePtr previous = pop();
      state_.handled_exception = previous->obj.get() == Py_None ? nullptr : previous;
      return;
    }
    case Op::CheckExcMatch: {
      ValuePtr types = pop();
      PyRef classes = value_to_python(types);
      if (!classes || !top()->obj) abort_trace(BreakCode::UnsupportedOperator, "except with " + describe_value(*types));
      const int match = PyErr_GivenExceptionMatches(top()->obj.get(), classes.get());
      push(state_.wrap_unguarded(match ? Py_True : Py_False));
      return;
    }
    case Op::Reraise: {
      ValuePtr exception = pop();
      if (!exception->obj || !PyExceptionInstance_Check(exception->obj.get())) {
        abort_trace(BreakCode::UnsupportedOpcode, "RERAISE of " + describe_value(*exception));
      }
      raise_exception_object(exception->obj.get());
    }
    case Op::RaiseVarargs: {
      ValuePtr cause = ins.arg == 2 ? pop() : nullptr;
      ValuePtr raised = ins.arg >= 1 ? pop() : state_.handled_exception;
      if (!raised) {
        PyErr_SetString(PyExc_RuntimeError, "No active exception to reraise");
        raise_python_error();
      }
      PyObject* obj = raised->obj.get();
      if (!obj || raised->is(ValueKind::Tensor)) abort_trace(BreakCode::UnsupportedOpcode, "raise of " + describe_value(*raised));
      PyRef exception;
      if (PyExceptionClass_Check(obj)) {
        // `raise ValueError`: the class is called with no arguments; only
        // classes whose construction runs no Python code are.
        if (!exception_class_is_builtin_made(obj)) {
          abort_trace(BreakCode::UnsupportedCall, std::string("raise of ") +
                                                      reinterpret_cast<PyTypeObject*>(obj)->tp_name +
                                                      ", whose constructor is Python code");
        }
        exception = PyRef::steal(PyObject_CallNoArgs(obj));
        if (!exception) raise_python_error();
      } else if (PyExceptionInstance_Check(obj)) {
        exception = raised->obj;
      } else {
        PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
        raise_python_error();
      }
      if (cause) {
        PyObject* cause_obj = cause->obj.get();
        if (!cause_obj || !(cause_obj == Py_None || PyExceptionInstance_Check(cause_obj))) {
          abort_trace(BreakCode::UnsupportedOpcode, "raise ... from " + describe_value(*cause));
        }
        PyException_SetCause(exception.get(), Py_NewRef(cause_obj));  // steals
      }
      raise_exception_object(exception.get());
    }
    case Op::WithExceptStart:
      abort_trace(BreakCode::UnsupportedOpcode, "an exception inside a with-block");
    default:
      abort_trace(BreakCode::UnsupportedOpcode, std::string("opcode ") + ins.raw_name);
  }
}

}  // namespace kiln::tracer
