"""Hang detection's heartbeat for Python workers (ddprun --hang_timeout), with no dependency.

    from ddprun import heartbeat
    for batch in loader:
        ...
        heartbeat.beat()

beat() writes a counter into the worker's heartbeat file through a shared mapping: no system call,
well under a microsecond. Outside hang detection (no DDPRUN_HEARTBEAT_FILE) it does nothing.
"""
import mmap
import os
import struct

_map = None
_count = 0
_pack = struct.Struct("<Q").pack_into


def beat():
    """One heartbeat: this worker is making progress."""
    global _map, _count
    if _map is None:
        path = os.environ.get("DDPRUN_HEARTBEAT_FILE")
        if not path:
            return
        fd = os.open(path, os.O_RDWR)
        try:
            _map = mmap.mmap(fd, 8)
        finally:
            os.close(fd)
    _count += 1
    _pack(_map, 0, _count)


def _end():
    """The worker's program has ended: ddprun's warm interpreter calls this at a worker's exit.
    Sets the counter's top bit, which later beats keep (the agent gives the interpreter's teardown
    a timeout of its own). Returns whether it wrote: False when no file is mapped."""
    global _count
    if _map is None:
        return False
    _count |= 1 << 63
    _pack(_map, 0, _count)
    return True


def _reopen():
    """An in-process restart (ddprun.inprocess): the next beat maps the attempt's new file."""
    global _map
    _map = None
