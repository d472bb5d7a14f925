"""The module kiln.compile returns for an nn.Module."""
import torch


class CompiledModule(torch.nn.Module):
    """Runs the original module's forward compiled.

    Parameters, buffers and submodules are the original's own (the same
    dicts), so state_dict keys, optimizers and .to() behave as before.
    """

    def __init__(self, module, compiled_call):
        # Skip Module.__init__'s fresh dicts: share the original's instead.
        object.__setattr__(self, "_kiln_original", module)
        object.__setattr__(self, "_kiln_call", compiled_call)
        for name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
                     "_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                     "_state_dict_hooks", "_load_state_dict_pre_hooks",
                     "_load_state_dict_post_hooks"):
            if name in module.__dict__:
                object.__setattr__(self, name, module.__dict__[name])
        for name, value in vars(module).items():
            if name.startswith("_") and name not in self.__dict__:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "training", module.training)

    @property
    def original_module(self):
        """The module that was compiled."""
        return self._kiln_original

    def forward(self, *args, **kwargs):
        return self._kiln_call(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._kiln_call(*args, **kwargs)

    def train(self, mode=True):
        self._kiln_original.train(mode)
        object.__setattr__(self, "training", mode)
        return self

    def __getattr__(self, name):
        return getattr(self._kiln_original, name)

    def __setattr__(self, name, value):
        setattr(self._kiln_original, name, value)
        if name == "training":
            object.__setattr__(self, name, value)

    def __repr__(self):
        return f"kiln.compile({self._kiln_original!r})"
