"""The PPO loop's environments, stepped in worker processes so a rollout uses every core.

Why: in a rollout step the network is one forward pass for all environments, in the
parent; the environments themselves (the simulator, the features) and the teacher's
look-ahead are most of the rest, and they are independent per environment. On the
2-core machine two workers step them side by side while the parent waits (it has nothing
to do until every next observation is in).

`VectorEnv` holds ``num_envs`` environments in ``workers`` processes, split into
contiguous slices (``workers=0``: all in the calling process). `VectorEnv.reset` and
`VectorEnv.step` return every environment's observation stacked in environment order,
with the teacher's action for it; an environment whose episode ends is reset at once
(its next observation is the new episode's first), as the serial loop did. Each
environment keeps its own RNG, seeded by `reset`, so the results are the same for any
number of workers.

Workers are started with multiprocessing's "spawn" method, like `simulator.compare`'s
(a fresh interpreter: no forked copy of torch's threads), so a script that trains must
do so under ``if __name__ == "__main__":``. A worker that raises makes the call raise
`WorkerError` with its traceback; a worker that dies makes it raise `WorkerError` naming
how; no worker outlives `VectorEnv.close`.
"""

from __future__ import annotations

import pickle
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np

from .config import PPOConfig
from .gym_env import EpisodeSampler
from .kinds import KINDS


class WorkerError(RuntimeError):
    """An environment worker failed or died."""


@dataclass
class Batch:
    """What one `VectorEnv.step` gives, per environment in order."""

    obs: dict[str, np.ndarray]  # stacked observations (after a reset where an episode ended)
    teacher: np.ndarray  # the teacher's action for each observation
    rewards: np.ndarray
    dones: np.ndarray  # the episode ended with this step
    ended: list[tuple[int, dict[str, Any]]]  # (environment, its last step's info) per ended episode


class _Slice:
    """Some of the environments, stepped in order in one process."""

    def __init__(self, cfg: PPOConfig, episodes: EpisodeSampler, count: int) -> None:
        kind = KINDS[cfg.agent]
        self.envs = [kind.make_env(cfg, episodes) for _ in range(count)]
        self._teacher, self._teacher_name = kind.teacher, cfg.teacher

    def reset(self, seeds: Sequence[int]) -> tuple[dict[str, np.ndarray], list[int]]:
        obs = [env.reset(seed=int(s))[0] for env, s in zip(self.envs, seeds)]
        return _stack(obs), self._labels()

    def step(self, actions: Sequence[int]) -> tuple[dict[str, np.ndarray], list[int], list[float], list[bool],
                                                    list[tuple[int, dict[str, Any]]]]:
        """Each environment's step (and reset, where its episode ended); the observations
        stacked, and the ended environments' indices within the slice with their last info."""
        obs, rewards, dones, ended = [], [], [], []
        for i, (env, a) in enumerate(zip(self.envs, actions)):
            o, r, terminated, truncated, info = env.step(int(a))
            done = terminated or truncated
            if done:
                ended.append((i, info))
                o, _ = env.reset()
            obs.append(o)
            rewards.append(r)
            dones.append(done)
        return _stack(obs), self._labels(), rewards, dones, ended

    def set_episodes(self, episodes: EpisodeSampler) -> None:
        for env in self.envs:
            env.episodes = episodes

    @staticmethod
    def map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """`VectorEnv.map`'s share of one process."""
        return [fn(x) for x in items]

    def _labels(self) -> list[int]:
        return [self._teacher(env, self._teacher_name) for env in self.envs]


def _work(conn: Connection) -> None:
    """A worker: build its slice from the first message, then answer each (method, args)
    with ("ok", result) or ("failed", summary, traceback) until the parent closes the pipe.
    Only the pipe's own errors end it quietly: an ``OSError`` of the work (a file the slice
    reads) is answered as a failure like any other, so the run fails with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it closes the workers
    part: _Slice | None = None
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):  # the parent is done with this worker, or gone
            return
        try:
            message = pickle.loads(raw)  # apart from the pipe: what it unpickles may raise anything
            if part is None:
                part = _Slice(*message)
                reply: tuple = ("ok", None)
            else:
                method, args = message
                reply = ("ok", getattr(part, method)(*args))
        except Exception as e:
            reply = ("failed", f"{type(e).__name__}: {e}", traceback.format_exc())
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        if part is None:  # building the slice failed: nothing to answer after that
            return


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    envs: slice


class VectorEnv:
    """``cfg.num_envs`` environments of ``cfg.agent`` on ``episodes``, in ``workers``
    processes (see the module docstring)."""

    def __init__(self, cfg: PPOConfig, episodes: EpisodeSampler, workers: int) -> None:
        self.num_envs = cfg.num_envs
        workers = min(workers, cfg.num_envs)
        self._local: _Slice | None = _Slice(cfg, episodes, cfg.num_envs) if workers == 0 else None
        self._workers: list[_Worker] = []
        if workers:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            bounds = np.linspace(0, cfg.num_envs, workers + 1).round().astype(int)
            try:
                for a, b in zip(bounds, bounds[1:]):
                    ours, theirs = ctx.Pipe()
                    process = ctx.Process(target=_work, args=(theirs,), name="attentived-env", daemon=True)
                    process.start()
                    theirs.close()  # so the worker's death reads as the end of the pipe
                    self._workers.append(_Worker(process, ours, slice(int(a), int(b))))
                for w in self._workers:
                    self._send(w, (cfg, episodes, w.envs.stop - w.envs.start))
                for w in self._workers:
                    self._receive(w)
            except BaseException:
                self.close()
                raise

    def reset(self, seeds: Sequence[int]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Start every environment's episode: environment ``i`` seeded with ``seeds[i]``."""
        parts = self._call("reset", [[list(seeds[s])] for s in self._slices()])
        return _joined([p[0] for p in parts]), np.array([t for p in parts for t in p[1]], np.int64)

    def step(self, actions: np.ndarray) -> Batch:
        """One action per environment (in order)."""
        parts = self._call("step", [[[int(a) for a in actions[s]]] for s in self._slices()])
        return Batch(
            obs=_joined([p[0] for p in parts]),
            teacher=np.array([t for p in parts for t in p[1]], np.int64),
            rewards=np.array([r for p in parts for r in p[2]], np.float32),
            dones=np.array([d for p in parts for d in p[3]], bool),
            ended=[(s.start + i, info) for s, p in zip(self._slices(), parts) for i, info in p[4]],
        )

    def set_episodes(self, episodes: EpisodeSampler) -> None:
        """Draw each environment's next episodes from ``episodes`` (a new curriculum stage)."""
        self._call("set_episodes", [[episodes] for _ in self._slices()])

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, the items dealt round the workers (``fn`` and the
        items must pickle): independent work between rollouts, such as validation runs."""
        n = max(len(self._workers), 1)
        parts = self._call("map", [[fn, list(items[k::n])] for k in range(n)])
        out: list[Any] = [None] * len(items)
        for k, part in enumerate(parts):
            out[k::n] = part
        return out

    def close(self) -> None:
        """Stop the workers now: they hold nothing a run keeps (a resumed run starts new
        episodes), and one in the middle of a validation episode would otherwise finish it
        before it reads that the pipe is closed (seconds, after a Ctrl-C)."""
        for w in self._workers:
            w.conn.close()
            w.process.terminate()
        for w in self._workers:
            w.process.join()
        self._workers = []

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ----

    def _slices(self) -> list[slice]:
        return [w.envs for w in self._workers] or [slice(0, self.num_envs)]

    def _call(self, method: str, args: list[list[Any]]) -> list[Any]:
        """``method(*args[k])`` on slice ``k`` of every worker (or the local slice); the
        results in slice order. The workers run side by side."""
        if self._local is not None:
            return [getattr(self._local, method)(*args[0])]
        for w, a in zip(self._workers, args):
            self._send(w, (method, a))
        return [self._receive(w) for w in self._workers]

    def _send(self, w: _Worker, message: Any) -> None:
        try:
            w.conn.send(message)
        except OSError:
            raise self._died(w) from None

    def _receive(self, w: _Worker) -> Any:
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            raise self._died(w) from None
        if message[0] == "failed":
            error = WorkerError(f"environment worker {w.process.name} (environments {w.envs.start}-{w.envs.stop - 1}) "
                                f"failed: {message[1]}")
            error.add_note(f"the worker's traceback:\n{message[2].rstrip()}")
            raise error
        return message[1]

    def _died(self, w: _Worker) -> WorkerError:
        w.process.join(timeout=5)
        code = w.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
        return WorkerError(
            f"environment worker (environments {w.envs.start}-{w.envs.stop - 1}) died ({how}). Workers are started "
            "with multiprocessing's 'spawn' method, which runs the calling script's main module again in each one: "
            "a script that trains must do so under `if __name__ == \"__main__\":`"
        )


def _stack(obs: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {k: np.stack([np.asarray(o[k]) for o in obs]) for k in obs[0]}


def _joined(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
