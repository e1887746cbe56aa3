"""The sitecustomize of a Python worker whose steps ddprun's straggler check measures (the agent
writes it beside the ddprun package it puts on the workers' PYTHONPATH, only for such a job):
installs ddprun._step_times, then runs the sitecustomize it shadows (the next one on sys.path, as
Debian's), so that a worker starts as it would without it. Never raises."""
import os
import sys


def _measure_steps():
    try:
        from ddprun import _step_times

        _step_times.install()
    except Exception as e:  # noqa: BLE001 - the worker runs unmeasured
        print(f"ddprun: steps not measured: {e}", file=sys.stderr)


def _shadowed():
    """The sitecustomize.py that the first one after this file's folder on sys.path would be."""
    here = os.path.dirname(os.path.abspath(__file__))
    after = False
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        if folder == here:
            after = True
        elif after and os.path.isfile(os.path.join(folder, "sitecustomize.py")):
            return os.path.join(folder, "sitecustomize.py")
    return None


_measure_steps()
_next = _shadowed()
if _next is not None:
    with open(_next, encoding="utf-8") as _f:
        _code = compile(_f.read(), _next, "exec")
    __file__ = _next
    exec(_code)  # noqa: S102 - the interpreter would have run it in our place
    del _f, _code
del _next
