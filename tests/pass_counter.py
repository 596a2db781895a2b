"""Counts the model work a command does: backward passes, the target tokens they cover, and forwards.

Observation only: the real torch.autograd.grad and load_model run; a batched backward
(is_grads_batched, one vmapped backward over c target tokens) counts c targets. Used by
tests that check the CLI's cost model (tests/unit/test_cli_cost.py, tests/integration/test_cli.py).
"""

from __future__ import annotations

import torch

import sequence_salience as ss


class PassCounter:
    def __init__(self):
        self.backwards = self.targets = self.forwards = 0

    def install(self, monkeypatch) -> "PassCounter":
        """Wraps torch.autograd.grad and ss.load_model (hooking every model it loads) for one test."""
        real_grad, real_load = torch.autograd.grad, ss.load_model

        def grad(outputs, inputs, grad_outputs=None, *args, is_grads_batched=False, **kwargs):
            self.backwards += 1
            self.targets += int(grad_outputs.shape[0]) if is_grads_batched else 1
            return real_grad(outputs, inputs, grad_outputs, *args, is_grads_batched=is_grads_batched, **kwargs)

        def load_model(*args, **kwargs):
            lm = real_load(*args, **kwargs)
            lm.model.register_forward_hook(self._on_forward)
            return lm

        monkeypatch.setattr(torch.autograd, "grad", grad)
        monkeypatch.setattr(ss, "load_model", load_model)
        return self

    def watch(self, lm) -> "PassCounter":
        """Counts the forwards of a model loaded already (a test's tiny model)."""
        lm.model.register_forward_hook(self._on_forward)
        return self

    def _on_forward(self, *_):
        self.forwards += 1
