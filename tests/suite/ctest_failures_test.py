"""scripts/ctest_failures.py on a real CTest run: a scratch CMake project with a passing test and a
failing one (51 lines of output, its reason last), run by ctest; the script prints the failing
test's name, result and the last lines of its output (as many as asked), nothing of the passing
one, and nothing at all for a run without failures.

    ctest_failures_test.py SCRIPT
"""
import os
import subprocess
import sys
import tempfile

PROJECT = """cmake_minimum_required(VERSION 3.16)
project(scratch NONE)
enable_testing()
add_test(NAME passes COMMAND sh -c "echo all is well")
add_test(NAME fails COMMAND sh -c "{fails}")
"""
FAILS = "i=1; while [ $i -le 50 ]; do echo line $i; i=$((i+1)); done; echo the reason; exit 3"


def run(script, *args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def ctest(root, fails):
    with open(os.path.join(root, "CMakeLists.txt"), "w") as f:
        f.write(PROJECT.format(fails=fails))
    build = os.path.join(root, "build")
    subprocess.run(["cmake", "-S", root, "-B", build], capture_output=True, check=True,
                   timeout=120)
    subprocess.run(["ctest"], cwd=build, capture_output=True, timeout=120)
    return build


def main():
    script = sys.argv[1]
    with tempfile.TemporaryDirectory() as root:
        build = ctest(root, FAILS)
        out = run(script, build, "5").splitlines()
        assert out == ["=== fails: Test Failed. The last 5 of its 51 lines of output:",
                       "line 47", "line 48", "line 49", "line 50", "the reason"], out
        default = run(script, build).splitlines()
        assert len(default) == 41 and default[1] == "line 12", default
        assert not any("all is well" in line for line in default), default
    with tempfile.TemporaryDirectory() as root:
        build = ctest(root, "exit 0")
        assert run(script, build) == "", "a run without failures printed something"
    print("the failing test's last lines printed, the passing test's not, a green run's nothing: "
          "passed")


if __name__ == "__main__":
    main()
