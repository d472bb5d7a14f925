"""kiln.compile, kiln.disable, kiln.reset, kiln.stats."""
import functools
import warnings

import torch

from . import _C, config, policy

BACKENDS = ("eager", "aot_eager", "inductor")
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# options= keys: kiln.config settings a compile may set for its own graphs,
# and torch.compile's inductor options that have a kiln meaning (the mode
# they stand for).
SETTING_OPTIONS = {"cpu_kernels": bool, "cuda_kernels": bool, "parameter_kernel_cache": bool,
                   "constant_subgraphs": bool, "static_regions": bool, "cpu_matmul": str, "conv_layout": str,
                   "conv_bias": str, "batch_input_casts": bool}
TORCH_OPTIONS = {"triton.cudagraphs": "reduce-overhead", "max_autotune": "max-autotune"}

# The targets ("CPU", "CUDA") whose eager replay kiln.compile has warned of.
_warned_inductor = set()


def _replay_reason(target):
    """Why backend 'inductor' would replay `target`'s graphs through torch, or None."""
    if target == "CPU":
        if not config.cpu_kernels:
            return "kiln.config.cpu_kernels is off"
        if not _C.cpu_kernels_available():
            return "this build of kiln has no LLVM code generation"
    else:
        if not config.cuda_kernels:
            return "kiln.config.cuda_kernels is off"
        if not _C.cuda_kernels_available():
            return "NVRTC or the CUDA driver cannot be loaded (KILN_LOGS=prims says which)"
    return None


def _check_options(backend, mode, dynamic):
    if not callable(backend) and (not isinstance(backend, str) or backend not in BACKENDS):
        raise ValueError(f"kiln.compile: unknown backend {backend!r}; valid backends: "
                         + ", ".join(repr(b) for b in BACKENDS) + ", or a callable(gm, example_inputs)")
    if mode not in MODES:
        raise ValueError(f"kiln.compile: unknown mode {mode!r}; valid modes: "
                         + ", ".join(repr(m) for m in MODES))
    if dynamic not in (None, True, False):
        raise ValueError(f"kiln.compile: dynamic must be None, True or False, got {dynamic!r}")
    if backend != "inductor":
        return
    for target in ("CPU", "CUDA"):
        # CUDA graphs matter only where torch sees a GPU.
        if target in _warned_inductor or (target == "CUDA" and not torch.cuda.is_available()):
            continue
        why = _replay_reason(target)
        if why:
            _warned_inductor.add(target)
            warnings.warn(f"kiln: backend 'inductor' runs compiled {target} graphs through the 'eager' "
                          f"backend (replayed through torch): {why}", RuntimeWarning, stacklevel=3)


def _mode_and_settings(mode, options):
    """(mode, kiln.config settings) from kiln.compile's mode= and options=."""
    if options is None:
        return mode, None
    if not isinstance(options, dict):
        raise TypeError(f"kiln.compile: options must be a dict, got {type(options).__name__}")
    if mode is not None:
        raise ValueError("kiln.compile: give mode or options, not both (as torch.compile)")
    unknown = sorted(k for k in options if k not in SETTING_OPTIONS and k not in TORCH_OPTIONS)
    if unknown:
        raise ValueError(f"kiln.compile: unknown options {unknown}; valid: "
                         + ", ".join(sorted(SETTING_OPTIONS) + sorted(TORCH_OPTIONS)))
    settings = {}
    for key, value in options.items():
        if key in TORCH_OPTIONS:
            if not isinstance(value, bool):
                raise TypeError(f"kiln.compile: options[{key!r}] must be a bool, got {type(value).__name__}")
            if value:
                if mode is not None:
                    raise ValueError(f"kiln.compile: options {sorted(k for k in options if k in TORCH_OPTIONS)} "
                                     "ask for two modes; kiln's autotuning adds no CUDA graphs")
                mode = TORCH_OPTIONS[key]
            continue
        if not isinstance(value, SETTING_OPTIONS[key]):
            raise TypeError(f"kiln.compile: options[{key!r}] must be a {SETTING_OPTIONS[key].__name__}, "
                            f"got {type(value).__name__}")
        if key == "cpu_matmul" and value not in ("auto", "kiln", "aten"):
            raise ValueError(f"kiln.compile: options['cpu_matmul'] must be 'auto', 'kiln' or 'aten', got {value!r}")
        if key == "conv_layout" and value not in ("auto", "channels_last", "keep"):
            raise ValueError(f"kiln.compile: options['conv_layout'] must be 'auto', 'channels_last' or 'keep', "
                             f"got {value!r}")
        if key == "conv_bias" and value not in ("auto", "kernels", "convolution"):
            raise ValueError(f"kiln.compile: options['conv_bias'] must be 'auto', 'kernels' or 'convolution', "
                             f"got {value!r}")
        settings[key] = value
    return mode, settings


def compile(fn_or_module=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None):
    """Returns fn_or_module with its frames traced into graphs and run compiled.

    Usable as kiln.compile(f), @kiln.compile and @kiln.compile(fullgraph=True).
    Under `kiln --compile=none` it returns fn_or_module unchanged (run eagerly).
    mode="reduce-overhead" replays graphs whose inputs are all CUDA tensors
    (with static sizes, not recording gradients) as CUDA graphs from their
    second call on; each call returns fresh copies of the outputs.
    mode="max-autotune" (or "max-autotune-no-cudagraphs", the same in kiln:
    no CUDA graphs) times each CUDA kernel's launch configurations at its
    first launch and keeps the fastest (kiln.stats()["kernels_autotuned"]);
    it changes nothing for CPU kernels.
    A callable backend gets each captured graph as torch.compile's custom
    backends do, backend(gm: torch.fx.GraphModule, example_inputs), on the
    graph's first call, and kiln runs what it returns (kiln._fx).
    options= sets kiln.config settings for this compile's graphs only
    ("cpu_kernels", "cuda_kernels", "parameter_kernel_cache", "constant_subgraphs",
    "static_regions", "cpu_matmul", "conv_layout", "conv_bias", "batch_input_casts"),
    and takes torch.compile's {"triton.cudagraphs": True} and
    {"max_autotune": True} for the modes they mean; like torch.compile, not
    together with mode=.
    """
    _check_options(backend, mode, dynamic)
    compile_mode, settings = _mode_and_settings(mode, options)
    if fn_or_module is None:
        return lambda target: compile(target, fullgraph=fullgraph, dynamic=dynamic,
                                      backend=backend, mode=mode, options=options)
    if not callable(fn_or_module):
        raise TypeError(f"kiln.compile expects a function or an nn.Module, got "
                        f"{type(fn_or_module).__name__}")
    if policy.policy() == "none":
        return fn_or_module
    if isinstance(fn_or_module, torch.nn.Module):
        from .compiled_module import CompiledModule
        label = policy.module_label(fn_or_module)
        return CompiledModule(fn_or_module, lambda target: _C.compiled(target, backend, bool(fullgraph), dynamic,
                                                                       label, compile_mode, settings))
    wrapper = _C.compiled(fn_or_module, backend, bool(fullgraph), dynamic, None, compile_mode, settings)
    _copy_metadata(wrapper, fn_or_module)
    return wrapper


def disable(fn):
    """Returns fn such that nothing it runs is ever traced."""
    if not callable(fn):
        raise TypeError(f"kiln.disable expects a callable, got {type(fn).__name__}")
    wrapper = _C.disabled(fn)
    _copy_metadata(wrapper, fn)
    return wrapper


def _copy_metadata(wrapper, fn):
    for name in functools.WRAPPER_ASSIGNMENTS:
        try:
            setattr(wrapper, name, getattr(fn, name))
        except AttributeError:
            pass
    wrapper.__wrapped__ = fn


def reset():
    """Drops every compiled graph and zeroes the counters."""
    _C.reset()


def stats():
    """Returns a snapshot of kiln's counters since the last reset()."""
    return _C.stats()


class set_stance:
    """Sets how every kiln-compiled function behaves, process-wide, as
    torch.compiler.set_stance does: "default"; "force_eager" (run eagerly,
    compile nothing; cached graphs are kept for later); "eager_on_recompile"
    (graphs whose guards hold still run, a call that would recompile runs
    eagerly and counts in stats()["eager_runs"]); "fail_on_recompile" (such a
    call raises kiln.RecompileError naming the failed guard). The first
    compile of a function is never a recompile.

    Takes effect at once when called; as a context manager it restores the
    previous stance on exit, and as a decorator, `@kiln.set_stance(...)`,
    it holds only while the decorated function runs.
    """

    def __init__(self, stance="default"):
        self._previous = _C.get_stance()
        _C.set_stance(stance)
        self._stance = stance

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C.set_stance(self._previous)
        return False

    def __call__(self, fn):
        # Decorating: the stance holds during calls of fn, not from now on.
        _C.set_stance(self._previous)
        stance = self._stance

        @functools.wraps(fn)
        def with_stance(*args, **kwargs):
            with set_stance(stance):
                return fn(*args, **kwargs)
        return with_stance


def is_compiling():
    """True while a compiler traces the calling code (kiln, or torch.compile's
    Dynamo), False when it runs eagerly: library code takes its capture path
    under it (Note [Compiler queries] in stdlib/torch_callables.cpp: kiln's
    tracer inlines this and answers torch.compiler.is_compiling() with True)."""
    return torch.compiler.is_compiling()


def allow_in_graph(fn):
    """Marks `fn` so that traced code's calls of it become one graph node
    each, run as written at call time, instead of being traced through;
    returns fn. fn must run on meta tensors (kiln reads its results'
    shapes so) and be differentiable by torch where gradients flow."""
    _C.allow_in_graph(fn)
    return fn
