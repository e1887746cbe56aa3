"""Two real torch processes rendezvous through ddprund and all-reduce with gloo.

    torch_gloo_all_reduce.py DDPRUND [PYTHON]   (PYTHON runs the torch processes; default this one)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ddprund_process import Ddprund  # noqa: E402

WORKER = r"""
import datetime, sys, torch, torch.distributed as dist
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = dist.TCPStore("127.0.0.1", port, world_size=world, is_master=False,
                      timeout=datetime.timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
t = torch.arange(1000, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
expected = torch.arange(1000, dtype=torch.float32) * sum(r + 1 for r in range(world))
assert torch.equal(t, expected), (rank, t[:5])
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: all_reduce ok")
"""


def main(binary, python):
    world = 2
    with Ddprund(binary) as server:
        procs = [subprocess.Popen([python, "-c", WORKER,
                                   str(r), str(world), str(server.port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(world)]
        outputs = []
        for p in procs:
            out, _ = p.communicate(timeout=120)
            outputs.append(out)
            assert p.returncode == 0, out
        status, err = server.stop()
        assert status == 0, err
    for out in outputs:
        print(out.strip())
    print("torch gloo init_process_group + all_reduce through ddprund: passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.executable)
