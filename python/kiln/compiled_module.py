"""The module kiln.compile returns for an nn.Module."""
from collections import OrderedDict

import torch

# The original's place in the wrapper's module tree: the same name as
# torch.compile's OptimizedModule, but kept out of every name (below).
CHILD = "_orig_mod"
# Module's bookkeeping tables in a fresh instance. The wrapper has its own
# contents (one child, no parameters or buffers) and load post-hooks
# (see _load_from_state_dict); the hook tables it shares with the original.
# Plain flags (_is_full_backward_hook) are read from the original.
_OWN = frozenset({"_parameters", "_buffers", "_non_persistent_buffers_set", "_modules",
                  "_load_state_dict_post_hooks"})
_SHARED = tuple(sorted(name for name, value in vars(torch.nn.Module()).items()
                       if isinstance(value, (dict, set)) and name not in _OWN))
_call_impl = torch.nn.Module._call_impl


def _run_forward(module, *args, **kwargs):
    """What the wrapper compiles: the forward the original has now. (kiln's
    own frames are not traced; the forward's frame is.)"""
    return module.forward(*args, **kwargs)


class _ByName(dict):
    """A CompiledModule's _parameters or _buffers: empty to walks (the
    wrapper holds none: they are its child's), the original's own table to
    lookups by name. Code that reaches a tensor by its name's path, which
    ends at the wrapper for the original's direct ones, and swaps it in the
    table there (torch.func.functional_call, torch.nn.utils.prune) swaps
    the original's."""

    def __init__(self, module, table):
        super().__init__()
        self._module = module
        self._name = table

    def _table(self):
        return self._module.__dict__[self._name]

    def __contains__(self, key):
        return key in self._table()

    def __getitem__(self, key):
        return self._table()[key]

    def __setitem__(self, key, value):
        self._table()[key] = value

    def __delitem__(self, key):
        del self._table()[key]

    def get(self, key, default=None):
        return self._table().get(key, default)

    def pop(self, key, *default):
        return self._table().pop(key, *default)


def _is_data_descriptor(cls, name):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return hasattr(type(klass.__dict__[name]), "__set__")
    return False


class CompiledModule(torch.nn.Module):
    """Runs the original module with its forward compiled.

    The original is the wrapper's one child (named "_orig_mod", as under
    torch.compile), and the wrapper holds no parameters or buffers of its
    own. So walks of a module tree holding the wrapper (modules(),
    children(), .to(), train(), apply(), FSDP's and DDP's) meet the original
    itself, with whatever is keyed on it (fully_shard's state), and each
    parameter once. Names leave the child out: parameters, buffers,
    submodules and state_dict keys are the original's, so optimizers and
    checkpoints behave as without kiln. Hooks registered on either are the
    original's (the tables are shared) and run once per call, eagerly
    (receiving the wrapper as their module), around the compiled forward:
    FSDP's all-gathers and reshards stay out of the traced code, as with
    `module.forward = kiln.compile(module.forward)`. A module whose class
    overrides __call__ has its whole call compiled instead. Other
    attributes are read from and written to the original.
    """

    def __init__(self, module, compile_call):
        """compile_call(fn) returns fn compiled with kiln.compile's settings."""
        # No Module.__init__: the bookkeeping is set up here.
        state = self.__dict__
        state["_kiln_original"] = module
        state["_parameters"] = _ByName(module, "_parameters")
        state["_buffers"] = _ByName(module, "_buffers")
        state["_non_persistent_buffers_set"] = set()
        state["_modules"] = {CHILD: module}
        for name in _SHARED:
            if name in module.__dict__:
                state[name] = module.__dict__[name]
        state["_load_state_dict_post_hooks"] = OrderedDict([("kiln", _restore_loaded_names)])
        if type(module).__call__ is torch.nn.Module.__call__:
            state["_kiln_forward"] = compile_call(_run_forward)
        else:
            # A call of its own (transformers' gradient-checkpointing
            # layers) decides what runs around forward: all of it compiled.
            state["_kiln_call"] = compile_call(module)

    @property
    def original_module(self):
        """The module that was compiled."""
        return self._kiln_original

    @property
    def training(self):
        return self._kiln_original.training

    @training.setter
    def training(self, mode):
        self._kiln_original.training = mode

    @property
    def _is_full_backward_hook(self):  # read by Module's call on the wrapper
        return self._kiln_original._is_full_backward_hook

    @_is_full_backward_hook.setter
    def _is_full_backward_hook(self, value):
        self._kiln_original._is_full_backward_hook = value

    def forward(self, *args, **kwargs):
        if "_kiln_call" in self.__dict__:
            return self._kiln_call(*args, **kwargs)
        return self._kiln_forward(self._kiln_original, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        if "_kiln_call" in self.__dict__:
            return self._kiln_call(*args, **kwargs)
        # Module's own call on the wrapper: the shared hooks, then forward.
        return _call_impl(self, *args, **kwargs)

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        # The wrapper and the original answer to the same name.
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        yield from self._kiln_original.named_modules(memo, prefix, remove_duplicate)

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        return self._kiln_original.state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        return self._kiln_original.load_state_dict(state_dict, strict=strict, assign=assign)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Reached from a parent's load_state_dict, which goes on to load the
        # wrapper's child from the keys under prefix + "_orig_mod.": they
        # are renamed so, and named back by _restore_loaded_names after. (The
        # original's submodules then find no version in the state_dict's
        # metadata: modules migrate old checkpoints by it, not new ones.)
        child = prefix + CHILD + "."
        for key in [k for k in state_dict if k.startswith(prefix)]:
            state_dict[child + key[len(prefix):]] = state_dict.pop(key)
        self.__dict__.setdefault("_kiln_loads", []).append((prefix, error_msgs, len(error_msgs)))

    def register_load_state_dict_post_hook(self, hook):
        return self._kiln_original.register_load_state_dict_post_hook(hook)

    def register_parameter(self, name, param):
        self._kiln_original.register_parameter(name, param)

    def register_buffer(self, name, tensor, persistent=True):
        self._kiln_original.register_buffer(name, tensor, persistent)

    def add_module(self, name, module):
        self._kiln_original.add_module(name, module)

    def register_module(self, name, module):
        self._kiln_original.register_module(name, module)

    def __getattr__(self, name):
        # Only for names not found on the wrapper itself.
        state = self.__dict__
        if name == CHILD and CHILD in state.get("_modules", ()):
            return state["_modules"][CHILD]
        if "_kiln_original" not in state:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(state["_kiln_original"], name)

    def __setattr__(self, name, value):
        # What the wrapper's class defines a setter for is handled there
        # (__class__, which fully_shard swaps, and the properties above);
        # the rest is the original's.
        if _is_data_descriptor(type(self), name):
            object.__setattr__(self, name, value)
        else:
            setattr(self._kiln_original, name, value)

    def __delattr__(self, name):
        delattr(self._kiln_original, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._kiln_original)))

    def __repr__(self):
        return f"kiln.compile({self._kiln_original!r})"


def _restore_loaded_names(module, incompatible_keys):
    """The load post-hook of CompiledModule `module`: the keys a parent's
    load_state_dict reports for its child, and its error messages, named as
    the original's (without "_orig_mod.")."""
    prefix, error_msgs, first_error = module.__dict__["_kiln_loads"].pop()
    child = prefix + CHILD + "."
    for keys in (incompatible_keys.missing_keys, incompatible_keys.unexpected_keys):
        keys[:] = [prefix + k[len(child):] if k.startswith(child) else k for k in keys]
    error_msgs[first_error:] = [m.replace(child, prefix) for m in error_msgs[first_error:]]
