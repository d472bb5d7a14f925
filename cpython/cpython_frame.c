/* Per-version facts about CPython's frames. See Note [Skipping a frame]. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_pystate.h>

#include "cpython/cpython_frame.h"

/* Note [Skipping a frame]
 * When a cached graph computes a frame's result, kiln returns it from its
 * PEP 523 evaluator without running the bytecode. Who then releases the
 * frame differs: on 3.11 the caller (_PyEval_Vector) clears and pops the
 * frame after the evaluator returns; on 3.12 the evaluator itself must, as
 * _PyEval_EvalFrameDefault does on RETURN_VALUE. A 3.12 frame can be
 * released here only when no frame object was created for it and it does
 * not start a fresh data-stack chunk (popping a chunk needs CPython's
 * private allocator); otherwise kiln runs the frame normally. */

#if PY_VERSION_HEX >= 0x030D0000 || PY_VERSION_HEX < 0x030B0000
#error "kiln supports CPython 3.11 and 3.12"
#endif

#if PY_VERSION_HEX >= 0x030C0000
#define KILN_FRAME_FUNC(frame) ((frame)->f_funcobj)
#else
#define KILN_FRAME_FUNC(frame) ((PyObject*)(frame)->f_func)
#endif

void kiln_set_eval_frame(KilnEvalFrameFn fn) {
  PyThreadState* tstate = PyThreadState_Get();
  _PyInterpreterState_SetEvalFrameFunc(tstate->interp,
                                       fn ? (_PyFrameEvalFunction)fn : _PyEval_EvalFrameDefault);
}

int kiln_eval_frame_is(KilnEvalFrameFn fn) {
  PyThreadState* tstate = PyThreadState_Get();
  return _PyInterpreterState_GetEvalFrameFunc(tstate->interp) == (_PyFrameEvalFunction)fn;
}

PyObject* kiln_eval_frame_default(PyThreadState* tstate, KilnFrame* frame, int throwflag) {
  return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

PyCodeObject* kiln_frame_code(KilnFrame* frame) { return frame->f_code; }

PyObject* kiln_frame_function(KilnFrame* frame) { return KILN_FRAME_FUNC(frame); }

PyObject* const* kiln_frame_localsplus(KilnFrame* frame) { return frame->localsplus; }

PyObject* kiln_frame_globals(KilnFrame* frame) { return frame->f_globals; }

PyObject* kiln_frame_builtins(KilnFrame* frame) { return frame->f_builtins; }

int kiln_thread_is_tracing(PyThreadState* tstate) { return tstate->tracing > 0; }

int kiln_frame_is_fresh_call(KilnFrame* frame) {
  PyCodeObject* code = frame->f_code;
  if (frame->owner != FRAME_OWNED_BY_THREAD) return 0;
  if (!(code->co_flags & CO_OPTIMIZED)) return 0;
  if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) return 0;
  if (!KILN_FRAME_FUNC(frame) || !PyFunction_Check(KILN_FRAME_FUNC(frame))) return 0;
  return frame->prev_instr == _PyCode_CODE(code) - 1;
}

#if PY_VERSION_HEX >= 0x030C0000

int kiln_frame_can_skip(PyThreadState* tstate, KilnFrame* frame) {
  if (frame->frame_obj != NULL || frame->owner != FRAME_OWNED_BY_THREAD) return 0;
  return (PyObject**)frame != &tstate->datastack_chunk->data[0];
}

void kiln_frame_finish_skipped(PyThreadState* tstate, KilnFrame* frame) {
  for (int i = 0; i < frame->stacktop; i++) Py_XDECREF(frame->localsplus[i]);
  frame->stacktop = 0;
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  tstate->datastack_top = (PyObject**)frame;
}

#else

int kiln_frame_can_skip(PyThreadState* tstate, KilnFrame* frame) {
  (void)tstate;
  (void)frame;
  return 1;
}

void kiln_frame_finish_skipped(PyThreadState* tstate, KilnFrame* frame) {
  (void)tstate;
  (void)frame;
}

#endif
