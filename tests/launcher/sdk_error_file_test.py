"""A C++ worker using ddp::run_main fails; ddprun's failure summary must show the real cause from the
error file the SDK wrote (an exception's type and message; a fatal signal by name).

    sdk_error_file_test.py DDPRUN CRASH_CHECK
"""
import subprocess
import sys


def main(ddprun, crash):
    cases = {
        "throw": ["exitcode  : 1", "ddp::CommError: all_reduce of 1024 float32 failed"],
        "segv": ["exitcode  : -11", "Fatal signal 11 (SIGSEGV) in crash_check"],
    }
    for mode, expected in cases.items():
        r = subprocess.run([ddprun, "--standalone", "--nproc_per_node=2", "--shutdown_timeout=5",
                            "--no_python", crash, mode], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, (mode, r.returncode, r.stderr)
        root = r.stderr[r.stderr.index("Root Cause"):]
        assert "rank      : 1 (local_rank: 1)" in root, r.stderr
        assert "/attempt_0/1/error.json" in root, r.stderr
        for text in expected:
            assert text in root, (mode, text, r.stderr)
    print("SDK error files (exception and SIGSEGV) reach ddprun's failure summary: passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
