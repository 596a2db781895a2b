"""One retained graph at a time (issue 43): a forward's graph is freed for another's turn and run again after it.

The core (sequence_salience/methods/gradients.py `per_target_gradients`, sequence_salience/slices.py "The graph
across pauses") frees its graph at a pause between chunks when the caller's `release_graph` says so, and gives
the same matrices; the server (lit_app/model/scheduler.py, salience_runs.py) then holds one graph for several
clients' matrix jobs, not one each. A graph is counted alive from its forward until its root is freed (the graph
is reachable only through it): the hidden states of `logprobs_cut_at_head` for per-target gradients, the log-prob
tensor of `target_logprobs` otherwise; the count is read, never timed.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pytest

import sequence_salience as ss
from lit_app.edge import clients
from lit_app.model import shared_model
from lit_app.model.scheduler import Priority
from lit_app.schema import method_registry
from sequence_salience.methods import gradients
from sequence_salience.methods.base import SalienceConfig
from tests.unit.sizers import ScriptedSizer
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until

PROMPT, TARGET = "Alice has three apples and Bob has two apples;", " together they have five apples."
METHODS = ("grad_norm", "grad_x_input", "integrated_gradients", "smooth_grad")
CONFIG = SalienceConfig(ig_steps=3, ig_rule="riemann_middle", smooth_grad_samples=2, smooth_grad_noise=0.2)


class Graphs:
    """Counts the forwards' graphs alive: wraps `gradients.target_logprobs` (monkeypatched) and follows each root."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.alive = 0
        self.most = 0
        self.built = 0
        self.threads: list[str] = []  # the thread of each forward, in order
        self._lock = threading.Lock()
        self._cutting = threading.local()  # inside logprobs_cut_at_head: its root is counted, not its logp
        original, original_cut = gradients.target_logprobs, gradients.logprobs_cut_at_head

        def counted(*args, **kwargs):
            logp = original(*args, **kwargs)
            if logp.requires_grad and not getattr(self._cutting, "on", False):
                self._built(logp)
            return logp

        def counted_cut(*args, **kwargs):
            self._cutting.on = True
            try:
                logp, root, root_grads = original_cut(*args, **kwargs)
            finally:
                self._cutting.on = False
            if root.requires_grad:
                self._built(root)
            return logp, root, root_grads

        monkeypatch.setattr(gradients, "target_logprobs", counted)
        monkeypatch.setattr(gradients, "logprobs_cut_at_head", counted_cut)

    def _built(self, root) -> None:
        with self._lock:
            self.alive += 1
            self.built += 1
            self.most = max(self.most, self.alive)
            self.threads.append(threading.current_thread().name)
        weakref.finalize(root, self._freed)

    def _freed(self) -> None:
        with self._lock:
            self.alive -= 1


@pytest.fixture(scope="module")
def lm():
    return wrap(MODEL_BUILDERS["llama"](seed=0), "llama")


def test_a_graph_freed_at_every_pause_gives_the_same_matrices_and_none_is_held_across_those_pauses(lm, monkeypatch):
    plain = ss.compute_salience(lm, PROMPT, TARGET, methods=METHODS, config=CONFIG)
    graphs = Graphs(monkeypatch)
    sizer = ScriptedSizer((1, 2))
    sizer.release_graph = lambda: True
    pauses = []  # (graphs alive, holding_graph) at each pause between chunks

    def progress(method, done, total):
        pauses.append((graphs.alive, sizer.holding_graph))

    freed = ss.compute_salience(lm, PROMPT, TARGET, methods=METHODS, config=CONFIG, slice_s=sizer, progress=progress)
    for method in METHODS:
        np.testing.assert_allclose(freed.matrices[method], plain.matrices[method], rtol=1e-5, atol=1e-7,
                                   err_msg=method)
    np.testing.assert_allclose(freed.extras["grad_gram"], plain.extras["grad_gram"], rtol=1e-5, atol=1e-7)
    held = [p for p in pauses if p[1]]
    # Held only across the pause right after each forward (where nothing was done yet: no turn without progress).
    assert held and all(alive == 1 for alive, _ in held)
    assert all(alive == 0 for alive, holding in pauses if not holding)
    assert sizer.forwards_again > 0 and graphs.built == sizer.forwards_again + len(held)
    assert not sizer.holding_graph


def test_without_release_the_graph_is_held_across_every_pause_of_a_pass_and_no_forward_runs_again(lm, monkeypatch):
    graphs = Graphs(monkeypatch)
    sizer = ScriptedSizer((1,))
    seen = []
    ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG, slice_s=sizer,
                        progress=lambda m, done, total: seen.append((done, total, graphs.alive, sizer.holding_graph)))
    total = seen[0][1]
    assert seen[0][2:] == (0, False)  # the method's announcement (0 of its units), before its forward
    seen = seen[1:]
    # Every pause of the pass holds the graph, except after the last chunk: it is freed before that pause.
    assert [s[2:] for s in seen if s[0] < total] == [(1, True)] * total
    assert seen[-1][2:] == (0, False)
    assert sizer.forwards_again == 0 and graphs.built == 1


def test_the_pause_after_a_forward_never_frees_the_graph(lm, monkeypatch):
    """A turn does at least one chunk: freeing the graph before any was done would let two jobs take turns for ever."""
    graphs = Graphs(monkeypatch)
    sizer = ScriptedSizer((2,))
    asked = []
    sizer.release_graph = lambda: asked.append(graphs.alive) or True
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG, slice_s=sizer)
    chunks = -(-result.num_targets // 2)
    assert len(asked) == chunks - 1  # after every chunk but the last (where the graph goes anyway)
    assert sizer.forwards_again == chunks - 1 and graphs.built == chunks


# --------------------------------------------------------------------------- the server's clients


def _shared(tiny: ss.LanguageModel) -> shared_model.SharedLM:
    # One target per chunk: every chunk is a pause where another client's job may take its turn.
    return shared_model.SharedLM(tiny, max_new_tokens=4, disk_cache=False,
                                 salience_config=ss.SalienceConfig(target_chunk_size=1))


def test_three_clients_matrix_jobs_take_turns_holding_one_graph_and_compute_what_each_computes_alone(lm, monkeypatch):
    prompts = [f"Client {k} has {k + 2} apples and Bob has two apples;" for k in range(3)]
    ig = next(e for e in method_registry.EXTRA_METHODS if e.method == "integrated_gradients")
    counts = {ig.field: 2}
    shared = _shared(lm)
    methods, config = shared.methods_and_config(counts)
    alone = [ss.compute_salience(lm, shared.format_prompt({"prompt": p}), TARGET, methods=methods, config=config)
             for p in prompts]
    graphs = Graphs(monkeypatch)
    chats = [shared.format_prompt({"prompt": p}) for p in prompts]
    results: list = [None] * 3

    def job(k: int) -> None:
        with clients.acting_as(f"client-{k}"):
            results[k] = shared.salience(chats[k], TARGET, counts)

    shared.lock.acquire()  # all three queue before any starts
    threads = [threading.Thread(target=job, args=(k,), name=f"job-{k}") for k in range(3)]
    for t in threads:
        t.start()
    wait_until(lambda: shared.lock.waiting(Priority.BACKGROUND) == 3, "the three jobs to queue")
    shared.lock.release()
    for t in threads:
        t.join()
    turns = graphs.threads
    switches = sum(a != b for a, b in zip(turns, turns[1:]))
    assert switches >= 4, f"the jobs' forwards ran one job after the other ({turns}): the test shows nothing"
    assert graphs.most == 1, f"{graphs.most} graphs alive at once"
    for k in range(3):
        for method in methods:
            np.testing.assert_allclose(results[k].matrices[method], alone[k].matrices[method], rtol=1e-5, atol=1e-7,
                                       err_msg=f"client {k} {method}")
    shared.jobs.cancel_all()
