"""The ddprun wheel: the ddprun and ddprund programs, which need nothing but glibc, behind entry
points that run them with the Python of the environment the wheel is installed in.

scripts/build-wheel.sh sets DDPRUN_VERSION and DDPRUN_PLATFORM_TAG (the manylinux tag of the newest
glibc symbol the programs use) and stages the programs into ddprun/bin/.
"""
import os
import stat

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

PROGRAMS = ("ddprun", "ddprund")


class BuildPy(build_py):
    """setuptools copies package data without its mode: the programs get theirs back."""

    def run(self):
        super().run()
        for name in PROGRAMS:
            path = os.path.join(self.build_lib, "ddprun", "bin", name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class PlatformDistribution(Distribution):
    """Native programs: the package goes to platlib, and the wheel is not pure."""

    def has_ext_modules(self):
        return True


class BdistWheel(bdist_wheel):
    """Any Python 3 (the programs do not use Python's ABI), one platform: the glibc they need."""

    def get_tag(self):
        return "py3", "none", os.environ["DDPRUN_PLATFORM_TAG"]


setup(
    name="ddprun",
    version=os.environ["DDPRUN_VERSION"],
    description="torchrun-compatible elastic launcher for distributed training, in C++",
    python_requires=">=3.8",
    packages=["ddprun"],
    package_data={"ddprun": [f"bin/{name}" for name in PROGRAMS]},
    entry_points={
        "console_scripts": ["ddprun = ddprun:main", "ddprund = ddprun:daemon"],
    },
    cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel},
    distclass=PlatformDistribution,
    zip_safe=False,
)
