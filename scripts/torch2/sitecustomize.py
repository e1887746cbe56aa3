"""Loaded at start-up by every python3 that scripts/torch2/python runs (through PYTHONPATH).

Debian's torch 2.x is built without libuv, yet torch.distributed.TCPStore defaults to
use_libuv=True and fails ("use_libuv was requested but PyTorch was build without libuv support"),
also inside torch (torchrun's c10d rendezvous). Once torch.distributed is imported, TCPStore
becomes a subclass whose default is use_libuv=False, wherever torch.distributed's modules hold it.
Nothing else changes, and nothing happens in a program that does not import torch.distributed.
"""
import importlib.abc
import importlib.machinery
import sys


def _default_without_libuv():
    import torch.distributed as dist

    base = dist.TCPStore

    class TCPStore(base):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    TCPStore.__module__, TCPStore.__qualname__ = base.__module__, base.__qualname__
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.distributed") and getattr(module, "TCPStore", None) is base:
            module.TCPStore = TCPStore


class _AfterTorchDistributed(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _default_without_libuv()

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterTorchDistributed())


def _run_the_shadowed_one():
    """Runs the sitecustomize.py this one shadows (the next one on sys.path, as the one ddprun's
    agent gives its workers), as the interpreter would have without this one."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    after = False
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        if folder == here:
            after = True
        elif after and os.path.isfile(os.path.join(folder, "sitecustomize.py")):
            path = os.path.join(folder, "sitecustomize.py")
            with open(path, encoding="utf-8") as f:
                code = compile(f.read(), path, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": path})  # noqa: S102
            return


_run_the_shadowed_one()
