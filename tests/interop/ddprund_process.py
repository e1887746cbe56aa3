"""Starts ddprund as a real process on a port the OS picks, for the interop tests."""
import signal
import subprocess


class Ddprund:
    def __init__(self, binary, *extra):
        self.proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", "0", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.proc.kill()
            raise RuntimeError(f"ddprund did not print its port: {line!r} {self.proc.stderr.read()}")
        self.port = int(line)

    def stop(self, timeout=10):
        """SIGTERM, then returns (exit status, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return self.proc.returncode, self.proc.stderr.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
