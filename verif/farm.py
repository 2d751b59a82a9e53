"""Running many independent tasks on Dask (``dask.distributed``), resumably.

The engine behind ``snpu regress`` and ``snpu sweep``: a task is a JSON-able description
(``spec``) and a module-level function that turns it into a JSON-able result.

* **Where**: :func:`connect` starts a ``LocalCluster`` on this machine (one single-threaded
  worker process per core by default) or connects to a running scheduler by address
  (``tcp://HOST:PORT``, e.g. one dask-jobqueue started on SLURM).
* **Resumable**: every result is stored in a :class:`ResultCache` under the sha256 of
  (task kind, spec, version of the code that decides it) the moment it arrives, so a rerun of the same command
  skips finished tasks and a crash loses only the tasks in flight.
* **Robust**: tasks are submitted with retries; when a worker dies mid-run, the scheduler
  reruns its tasks elsewhere, and each task's result is collected exactly once.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from snpu.errors import SnpuError
from snpu.fileio import atomic_write

ROOT = Path(__file__).resolve().parents[1]
#: source folders whose code decides a task's result (a change invalidates cached results)
CODE_DIRS = ("rtl", "verif", "compiler")


class FarmError(SnpuError):
    """The cluster could not be reached or a task could not be run."""


def code_version(paths: tuple[str, ...] = CODE_DIRS) -> str:
    """sha256 over the source files under ``paths`` (folders or files of the package:
    what decides a task's result), 16 hex digits."""
    h = hashlib.sha256()
    base = ROOT if (ROOT / "verif").is_dir() else Path(__file__).resolve().parent.parent
    for d in paths:
        files = [base / d] if (base / d).is_file() else sorted((base / d).rglob("*.py"))
        for f in files:
            h.update(str(f.relative_to(base)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def task_key(kind: str, spec: dict, version: str) -> str:
    blob = json.dumps({"kind": kind, "spec": spec, "code": version}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class ResultCache:
    """One JSON file per finished task, named by its key, written atomically."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self._path(key).read_text())
        except FileNotFoundError:
            return None
        except json.JSONDecodeError:
            return None  # a torn file from an older crash: the task runs again

    def put(self, key: str, result: dict) -> None:
        atomic_write(self._path(key), json.dumps(result))


def connect(scheduler: str | None = None, workers: int | None = None, timeout: float = 10.0):
    """A ``distributed.Client``: to ``scheduler`` (an address) or to a new ``LocalCluster``
    of ``workers`` single-threaded worker processes (default: one per CPU)."""
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            return Client(scheduler, timeout=f"{timeout}s")
        except (OSError, TimeoutError, ValueError) as e:
            raise FarmError(f"scheduler {scheduler}: unreachable ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else 'no answer'})") from None
    n = workers or os.cpu_count() or 1
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=40)
    return Client(cluster)


def close(client) -> None:
    """Close the client, and its cluster when :func:`connect` started one."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


@dataclass
class Outcome:
    """Results in task order, and how many came from the cache."""

    results: list[dict]
    cached: int
    ran: int


def run_tasks(client, kind: str, fn: Callable[[dict], dict], specs: list[dict],
              cache: ResultCache | None, *, progress: Callable[[int, int], None] | None = None,
              retries: int = 3, code: tuple[str, ...] = CODE_DIRS) -> Outcome:
    """Run ``fn(spec)`` for every spec on the cluster (``client`` None: in this process),
    skipping specs whose result is cached; every result is cached as it arrives.  ``code``:
    the package folders / files whose source keys the cache (:func:`code_version`)."""
    version = code_version(code)
    keys = [task_key(kind, s, version) for s in specs]
    results: dict[int, dict] = {}
    for i, k in enumerate(keys):
        hit = cache.get(k) if cache is not None else None
        if hit is not None:
            results[i] = hit
    cached = len(results)
    todo = [i for i in range(len(specs)) if i not in results]
    done = cached
    if progress:
        progress(done, len(specs))
    if client is None:
        for i in todo:
            results[i] = _store(cache, keys[i], fn(specs[i]))
            done += 1
            if progress:
                progress(done, len(specs))
    elif todo:
        from distributed import as_completed

        futures = {client.submit(fn, specs[i], key=f"{kind}-{keys[i]}", pure=False,
                                 retries=retries): i for i in todo}
        for fut in as_completed(list(futures)):
            i = futures[fut]
            try:
                res = fut.result()
            except Exception as e:  # the task itself raised: a result that says so
                res = {"error": f"{type(e).__name__}: {e}"}
            if i in results:
                continue  # exactly once
            results[i] = _store(cache, keys[i], res)
            done += 1
            if progress:
                progress(done, len(specs))
    return Outcome([results[i] for i in range(len(specs))], cached, len(todo))


def ping(spec: dict) -> dict:
    """An empty task: what the engine costs per task (``bench/scale.py``)."""
    return {"ok": True}


def _store(cache: ResultCache | None, key: str, result: dict) -> dict:
    if cache is not None and "error" not in result:
        cache.put(key, result)
    return result
