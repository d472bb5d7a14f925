/* The quarantine around CPython's internal frame layout (PEP 523). Only
 * cpython_frame.c includes CPython's internal headers; the rest of kiln
 * sees these functions. All of them require the GIL. */
#pragma once

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CPython's _PyInterpreterFrame, kept opaque. */
typedef struct _PyInterpreterFrame KilnFrame;

/* A PEP 523 frame evaluator. */
typedef PyObject* (*KilnEvalFrameFn)(PyThreadState* tstate, KilnFrame* frame, int throwflag);

/* Installs `fn` as this interpreter's frame evaluator; NULL restores
 * CPython's default. */
void kiln_set_eval_frame(KilnEvalFrameFn fn);

/* True when kiln's evaluator is the installed one. */
int kiln_eval_frame_is(KilnEvalFrameFn fn);

/* Runs the frame with CPython's own evaluator. Returns a new reference, or
 * NULL with an exception set. */
PyObject* kiln_eval_frame_default(PyThreadState* tstate, KilnFrame* frame, int throwflag);

/* The frame's code object (borrowed). */
PyCodeObject* kiln_frame_code(KilnFrame* frame);

/* The frame's function object (borrowed), or NULL. */
PyObject* kiln_frame_function(KilnFrame* frame);

/* The frame's fast locals (CPython's localsplus array). */
PyObject* const* kiln_frame_localsplus(KilnFrame* frame);

/* The frame's globals and builtins dicts (borrowed). */
PyObject* kiln_frame_globals(KilnFrame* frame);
PyObject* kiln_frame_builtins(KilnFrame* frame);

/* True when the frame is a plain function call that has not started
 * running yet (not a generator resuming, not module or class code). */
int kiln_frame_is_fresh_call(KilnFrame* frame);

/* Nonzero while the thread runs code CPython keeps from tracing: audit
 * hooks (sys.addaudithook) and sys.settrace/setprofile callbacks. */
int kiln_thread_is_tracing(PyThreadState* tstate);

/* True when kiln may compute the frame's result without running it and
 * then call kiln_frame_finish_skipped(). False means: run it normally. */
int kiln_frame_can_skip(PyThreadState* tstate, KilnFrame* frame);

/* Releases what a skipped frame holds, as returning from it would. Call it
 * exactly once, after the result is computed, when kiln_frame_can_skip()
 * said yes. */
void kiln_frame_finish_skipped(PyThreadState* tstate, KilnFrame* frame);

#ifdef __cplusplus
}
#endif
