#!/usr/bin/env python3
"""Prints the end of each failed test's output from a CTest run's LastTest.log, once more after
CTest's summary: CTest prints it where the test ended, in the middle of a long log, and a log cut
to its beginning and end (CI keeps such a part) then says which test failed but not why.

    ctest_failures.py BUILD_DIR [LINES]    (LINES of output per failed test, 40 unless given;
                                            at most 5 tests)
"""
import os
import re
import sys

SECTION = re.compile(r"^\d+/\d+ Testing: (.+)$", re.M)
OUTPUT = re.compile(r"^Output:\n-+\n", re.M)  # the line of dashes under it, whatever its length
MOST_TESTS = 5


def failures(log):
    """(name, output lines, result) of every test in `log` whose result is not 'Test Passed.'"""
    starts = list(SECTION.finditer(log))
    for i, m in enumerate(starts):
        section = log[m.start():starts[i + 1].start() if i + 1 < len(starts) else len(log)]
        output = OUTPUT.split(section, 1)[-1].split("<end of output>", 1)[0]
        result = re.search(r"^Test time = .*\n-+\n(.*)$", section, re.M)
        verdict = result.group(1).strip() if result else "no result (the run ended first)"
        if verdict != "Test Passed.":
            yield m.group(1), output.rstrip("\n").splitlines(), verdict


def main():
    build = sys.argv[1]
    lines = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    path = os.path.join(build, "Testing", "Temporary", "LastTest.log")
    try:
        with open(path, errors="replace") as f:
            log = f.read()
    except OSError as e:
        print(f"ctest_failures: {e}")
        return
    failed = list(failures(log))
    for name, output, verdict in failed[:MOST_TESTS]:
        print(f"=== {name}: {verdict} The last {min(lines, len(output))} of its "
              f"{len(output)} lines of output:")
        print("\n".join(output[-lines:]))
    if len(failed) > MOST_TESTS:
        print(f"=== and {len(failed) - MOST_TESTS} more failed tests: {path}")


if __name__ == "__main__":
    main()
