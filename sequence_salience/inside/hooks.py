"""Forward hooks that are always removed, also when the code inside raises."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class HookSet:
    """Collects hook handles; `close()` removes every one of them (idempotent)."""

    def __init__(self) -> None:
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def pre(self, module: torch.nn.Module, fn, with_kwargs: bool = False) -> None:
        """fn(module, args) -> None | new args (a forward pre-hook); with_kwargs: fn(module, args, kwargs)."""
        self._handles.append(module.register_forward_pre_hook(fn, with_kwargs=with_kwargs))

    def post(self, module: torch.nn.Module, fn) -> None:
        """fn(module, args, output) -> None | new output (a forward hook)."""
        self._handles.append(module.register_forward_hook(fn))

    def close(self) -> None:
        while self._handles:
            self._handles.pop().remove()


@contextlib.contextmanager
def hook_scope() -> Iterator[HookSet]:
    """`with hook_scope() as hooks: hooks.pre(m, fn); ...` — every hook is removed on exit, error or not."""
    hooks = HookSet()
    try:
        yield hooks
    finally:
        hooks.close()


def _ours(hook: object) -> bool:
    """False for transformers' own output recorder: a forward hook it installs once per module, for
    good, the first time a forward asks for `output_hidden_states` (the salience slices do)."""
    return "output_capturing_hook" not in getattr(hook, "__qualname__", "")


def count_hooks(model: torch.nn.Module) -> int:
    """Forward (pre-)hooks registered on any submodule of `model`, transformers' own output recorder
    left out (tests check it returns to 0)."""
    return sum(sum(map(_ours, m._forward_pre_hooks.values())) + sum(map(_ours, m._forward_hooks.values()))
               for m in model.modules())
