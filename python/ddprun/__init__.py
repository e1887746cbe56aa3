"""ddprun, installed with pip: the launcher runs Python workers with this environment's Python.

`ddprun ...` and `python -m ddprun ...` replace themselves with the native launcher (no Python
process stays between it and the workers); PYTHON_EXEC, when set, still chooses the workers'
interpreter. `ddprund ...` runs the rendezvous daemon.

The same file heads the copy of the package the agent writes beside a job's checkpoint regions
for its workers (ddprun.checkpoint, ddprun.heartbeat): where the wheel is installed too, the two
are one package.
"""
import os
import sys
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _exec(program, env):
    path = os.path.join(BIN, program)
    try:
        os.execve(path, [program, *sys.argv[1:]], env)
    except OSError as e:
        sys.exit(f"{program}: cannot run {path}: {e.strerror}")


def main():
    """The launcher, torchrun's command line; workers run with sys.executable."""
    _exec("ddprun", {**os.environ, "DDPRUN_INTERPRETER": sys.executable})


def daemon():
    """ddprund, the rendezvous daemon."""
    _exec("ddprund", dict(os.environ))
