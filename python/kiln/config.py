"""Process-wide settings: `kiln.config.cache_size_limit = 16`."""
import sys as _sys
import types as _types
import warnings as _warnings

from . import _C


class _Config(_types.ModuleType):
    """Module whose attributes read and write the native runtime's settings."""

    @property
    def cache_size_limit(self) -> int:
        """Compiled variants kept per function before it runs eagerly (default 8)."""
        return _C.get_cache_size_limit()

    @cache_size_limit.setter
    def cache_size_limit(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"cache_size_limit must be an int, got {type(value).__name__}")
        _C.set_cache_size_limit(value)


    @property
    def cpu_kernels(self) -> bool:
        """backend="inductor" decomposes CPU graphs into prims and compiles
        their pointwise and reduction parts to kernels through LLVM (default
        True). False makes inductor replay graphs through torch, like the
        eager backend. Read when a graph is compiled."""
        return _C.get_cpu_kernels()

    @cpu_kernels.setter
    def cpu_kernels(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"cpu_kernels must be a bool, got {type(value).__name__}")
        _C.set_cpu_kernels(value)

    @property
    def cpu_matmul(self) -> str:
        """Who computes the matrix products (matmul, mm, bmm, addmm, linear,
        @) of float32/float64 CPU graphs under backend="inductor" with
        cpu_kernels on: "kiln" (kiln's generated GEMM kernels), "aten"
        (torch.matmul) or "auto" (default: on the first call of each shape
        and layout, both are timed and the faster kept for the process;
        KILN_LOGS=kernels shows the timings). Read when a graph is
        compiled."""
        return _C.get_cpu_matmul()

    @cpu_matmul.setter
    def cpu_matmul(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"cpu_matmul must be a str, got {type(value).__name__}")
        _C.set_cpu_matmul(value)

    @property
    def conv_layout(self) -> str:
        """Where backend="inductor" runs 2-d convolutions channels-last,
        with the kernels between them following (as torch.compile's layout
        optimization): "auto" (default: inference graphs on CUDA, whose
        cuDNN tensor-core convolutions are NHWC), "channels_last" (every
        graph with a convolution: CUDA training graphs, CPU ones) or "keep"
        (the traced layouts). Graph
        outputs keep eager's strides either way. KILN_LOGS=prims says what
        each graph got. Read when a graph is compiled."""
        return _C.get_conv_layout()

    @conv_layout.setter
    def conv_layout(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"conv_layout must be a str, got {type(value).__name__}")
        _C.set_conv_layout(value)

    @property
    def conv_bias(self) -> str:
        """Which graphs of backend="inductor" call their convolutions without
        the bias and add it in the kernel that reads the result (as
        torch.compile does; torch's CUDA convolution adds it in a kernel of
        its own): "auto" (default: inference graphs on CUDA), "kernels"
        (every graph: CUDA training graphs, CPU ones) or "convolution" (the
        call adds it). Read when a graph is compiled."""
        return _C.get_conv_bias()

    @conv_bias.setter
    def conv_bias(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"conv_bias must be a str, got {type(value).__name__}")
        _C.set_conv_bias(value)

    @property
    def cuda_kernels(self) -> bool:
        """backend="inductor" decomposes graphs whose tensors are all on one
        CUDA device into prims and compiles their fused pointwise and
        reduction groups to CUDA kernels through NVRTC, launched on torch's
        current stream (default True; False replays such graphs through
        torch, and kiln.compile warns; see docs/architecture.md, "Inductor
        (CUDA)"). Read when a graph is compiled."""
        return _C.get_cuda_kernels()

    @cuda_kernels.setter
    def cuda_kernels(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"cuda_kernels must be a bool, got {type(value).__name__}")
        _C.set_cuda_kernels(value)

    @property
    def parameter_kernel_cache(self) -> bool:
        """Inference graphs on the GPU keep, between calls, the results of
        kiln kernels that read only parameters (autocast's bfloat16 copies
        of the weights), recomputed when a parameter changes in place or is
        replaced (default True). Saves a launch and a pass over the weights
        per such kernel and call, at the memory of the kept results; False
        recomputes them every call, as eager autocast does. Read when a
        graph is compiled."""
        return _C.get_parameter_kernel_cache()

    @parameter_kernel_cache.setter
    def parameter_kernel_cache(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"parameter_kernel_cache must be a bool, got {type(value).__name__}")
        _C.set_parameter_kernel_cache(value)

    @property
    def constant_subgraphs(self) -> bool:
        """Nodes of a compiled graph that read none of its inputs (masks
        built from sizes alone: Swin's shifted-window masks, causal masks)
        run once, at the graph's first call, and the tensors the rest reads
        are kept for later calls (default True; docs/architecture.md,
        "Constant subgraphs"). Costs the kept tensors' memory while the
        compiled graph lives; False computes them every call. Read when a
        graph is compiled."""
        return _C.get_constant_subgraphs()

    @constant_subgraphs.setter
    def constant_subgraphs(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"constant_subgraphs must be a bool, got {type(value).__name__}")
        _C.set_constant_subgraphs(value)

    @property
    def batch_input_casts(self) -> bool:
        """CUDA graphs cast their input tensors (autocast's casts of the
        weights before each matmul) in one foreach copy per dtype pair
        instead of one kernel each (default True; Note [Batched weight
        casts] in inductor/batched_casts.cpp): fewer launches, the copies
        living from the first cast on. Not for inference graphs that keep
        kernels of parameters (parameter_kernel_cache), which cast once.
        Read when a graph is compiled."""
        return _C.get_batch_input_casts()

    @batch_input_casts.setter
    def batch_input_casts(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"batch_input_casts must be a bool, got {type(value).__name__}")
        _C.set_batch_input_casts(value)

    @property
    def static_regions(self) -> bool:
        """A graph with symbolic sizes whose calls mostly work at static
        sizes (generate()'s decoding step: only the KV cache grows) compiles
        its static regions once and replays the calls that touch symbolic
        sizes eagerly, rather than compiling once per size (default True;
        docs/architecture.md, "Dynamic shapes"). False compiles every such
        graph per size. Read when a graph is compiled."""
        return _C.get_static_regions()

    @static_regions.setter
    def static_regions(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"static_regions must be a bool, got {type(value).__name__}")
        _C.set_static_regions(value)

    @property
    def experimental_cuda_kernels(self) -> bool:
        """Deprecated name of cuda_kernels (before CUDA kernels were the default)."""
        return self.cuda_kernels

    @experimental_cuda_kernels.setter
    def experimental_cuda_kernels(self, value: bool) -> None:
        _warnings.warn("kiln.config.experimental_cuda_kernels is deprecated: use kiln.config.cuda_kernels "
                       "(on by default)", DeprecationWarning, stacklevel=2)
        self.cuda_kernels = value


_sys.modules[__name__].__class__ = _Config
