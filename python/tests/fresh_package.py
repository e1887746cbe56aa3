"""What the tests of ddprun's Python package without a job share: the package imported anew, as a
new worker imports it, and an expected error."""
import importlib
import os
import shutil
import sys


def fresh(package):
    """ddprun.checkpoint imported anew from `package` (no region mapped yet)."""
    for name in [m for m in sys.modules if m == "ddprun" or m.startswith("ddprun.")]:
        del sys.modules[name]
    sys.path.insert(0, package)
    return importlib.import_module("ddprun.checkpoint")


def expect_error(fn, text, kind="CheckpointError"):
    """Calls `fn`, which must raise an error of type `kind` (any, for None) saying `text` (in its
    message, or in one of its failures': torch.distributed.checkpoint gathers each rank's)."""
    try:
        fn()
    except BaseException as e:  # of whichever import of the module (DCP's is a BaseException)
        said = [str(e)] + [str(f) for f in getattr(e, "failures", {}).values()]
        assert (kind is None or type(e).__name__ == kind) and any(text in m for m in said), \
            (text, said)
        return
    raise AssertionError(f"no error ({text})")


def run(main):
    """Runs a test's `main`, then removes the region folder it made (DDPRUN_CHECKPOINT_DIR)."""
    try:
        main()
    finally:
        shutil.rmtree(os.environ.get("DDPRUN_CHECKPOINT_DIR", "/nonexistent"), ignore_errors=True)
