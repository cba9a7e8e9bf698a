"""Dumps written to files (the operator's ``SIGUSR1``): the full dump plus the trio task
tree, to ``state_dir/dump-YYYYmmdd-HHMMSS.json`` (UTC), its text made in slices between
which the router runs and written by a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import trio

from gnutella_router.observe.dump_stream import JsonStyle, full_dump_document, write_json
from gnutella_router.observe.dumps import add_source_lines, count_tasks, task_tree
from gnutella_router.observe.view import RouterView

FILE_CHUNK_BYTES = 1 << 20
"""Text handed to the worker thread that writes a dump file, per write."""


async def write_dump_file(daemon: RouterView, directory: Path | None = None) -> Path:
    """Write the full dump and the trio task tree to ``dump-YYYYmmdd-HHMMSS.json``.

    The dump is taken on the trio thread (one instant, every route entry); its text is
    made there too, in slices between which the router runs (see :mod:`.dump_stream`),
    and written by a worker thread a chunk at a time, as are the source lines read and
    the directory made. The file goes in ``directory`` (the daemon's state directory by
    default), is written under a temporary name and renamed, and gets ``-2``, ``-3``...
    when a dump of the same second exists.

    Returns:
        The file written, as an absolute path.

    Raises:
        OSError: the directory or file cannot be written.
    """
    tree = task_tree()
    extra: dict[str, object] = {"tasks": tree, "task_count": count_tasks(tree)}
    document = full_dump_document(daemon, limit=None, extra=extra)  # every route
    target = Path(directory) if directory is not None else daemon.config.state_path
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())

    def prepare() -> Path:
        add_source_lines(tree)
        target.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            suffix = "" if attempt == 1 else f"-{attempt}"
            path = (target / f"dump-{stamp}{suffix}.json").absolute()
            if not path.exists():
                break
        return path

    path = await trio.to_thread.run_sync(prepare)
    temporary = path.with_name(path.name + ".tmp")
    try:
        async with await trio.open_file(temporary, "wb") as file:
            await write_json(document, JsonStyle.INDENTED, file.write, chunk_bytes=FILE_CHUNK_BYTES)
        await trio.to_thread.run_sync(os.replace, temporary, path)
    finally:
        with trio.CancelScope(shield=True), contextlib.suppress(OSError):
            await trio.to_thread.run_sync(lambda: temporary.unlink(missing_ok=True))
    return path


async def write_dump_logged(daemon: RouterView) -> Path | None:
    """:func:`write_dump_file`, logging where it went or why it could not be written."""
    log = daemon.log.bind(stage="admin")
    try:
        path = await write_dump_file(daemon)
    except OSError as exc:
        log.error("dump not written", error=str(exc))
        return None
    log.info("dump written", path=str(path))
    return path
