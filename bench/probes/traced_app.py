"""``bench.peers.apps:registry`` in a worker that traces its allocations, for
``bench.probes.worker_memory``.

``toolq worker --app bench.probes.traced_app:registry`` serves the same tools; with
``BENCH_TRACE_DIR`` set, the process starts ``tracemalloc`` (10 frames) when it imports the
app, and a thread of its own writes ``<dir>/<pid>.stats.json`` (traced bytes now, and
``tracemalloc``'s own overhead) every second and, for each file ``<dir>/<name>.want`` that
appears, a snapshot to ``<dir>/<pid>.<name>.snapshot`` (then ``<name>.want`` is removed by
whoever asked, once they see the snapshot). A threads-pool worker is one process: every
allocation of the consumer and the pool is traced.
"""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc
from pathlib import Path

from bench.peers.apps import registry

__all__ = ["registry"]


def _watch(folder: Path) -> None:
    done: set[str] = set()
    pid = os.getpid()
    while True:
        current, _ = tracemalloc.get_traced_memory()
        stats = {"traced": current, "overhead": tracemalloc.get_tracemalloc_memory()}
        (folder / f"{pid}.stats.json").write_text(json.dumps(stats))
        for want in folder.glob("*.want"):
            if want.stem not in done:
                done.add(want.stem)
                tracemalloc.take_snapshot().dump(str(folder / f"{pid}.{want.stem}.snapshot"))
        time.sleep(1.0)


_folder = os.environ.get("BENCH_TRACE_DIR")
if _folder:
    tracemalloc.start(10)
    threading.Thread(target=_watch, args=(Path(_folder),), name="trace", daemon=True).start()
