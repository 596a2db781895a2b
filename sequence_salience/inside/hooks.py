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


def count_hooks(model: torch.nn.Module) -> int:
    """Forward (pre-)hooks registered on any submodule of `model` (tests check it returns to 0)."""
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
