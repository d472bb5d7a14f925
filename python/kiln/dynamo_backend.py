"""kiln's compiler behind torch.compile's capture:

    model = torch.compile(model, backend="kiln")

Dynamo captures the graph and hands the backend an FX GraphModule whose
generated `forward` calls torch functions and methods (parameters passed as
inputs); kiln compiles that forward like any function it is given: its
tracer reads the generated code, then decomposition, autograd and code
generation run as under kiln.compile. So users who keep Dynamo's capture
get kiln's kernels and compile times; guards, graph breaks and recompiles
stay Dynamo's (kiln's own guards on the forward hold for Dynamo's inputs).

The name "kiln" reaches torch through the `torch_dynamo_backends` entry
point declared by python/kiln-0.1.dist-info (found wherever python/ is on
the path: setup.sh's kiln.pth or PYTHONPATH), and `import kiln` registers
it too where torch._dynamo is loaded already (importing it costs most of a
second, so kiln does not do it itself).
"""
from .compile_api import compile as _kiln_compile

_BACKENDS = ("inductor", "aot_eager", "eager")


def backend(gm, example_inputs, mode=None, options=None):
    """torch.compile's backend contract: a callable that runs `gm` for inputs
    like `example_inputs`, here kiln.compile of its forward. `mode` is
    kiln.compile's (None, "default", "reduce-overhead"); `options` may name
    kiln's backend, {"backend": "inductor" | "aot_eager" | "eager"}, and
    holds kiln.compile's options= otherwise (unknown ones raise there)."""
    options = dict(options or {})
    kiln_backend = options.pop("backend", "inductor")
    if kiln_backend not in _BACKENDS:
        raise ValueError(f"kiln's torch.compile backend: options['backend'] must be one of {_BACKENDS}, "
                         f"not {kiln_backend!r}")
    # A lazily generated GraphModule writes its code on first call, through
    # frames kiln would otherwise see as part of the forward.
    real_recompile = getattr(gm, "real_recompile", None)
    if real_recompile is not None:
        real_recompile()
    return _kiln_compile(gm.forward, backend=kiln_backend, mode=None if mode == "default" else mode,
                         options=options or None)


def register():
    """Registers `backend` as torch.compile's backend "kiln" (imports torch._dynamo)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    if _COMPILER_FNS.get("kiln") is not backend:
        _COMPILER_FNS.pop("kiln", None)
        register_backend(backend, name="kiln")
