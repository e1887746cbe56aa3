"""Hosts torch's own TCPStore server (of the python that runs it) on a port the OS picks; prints the port,
then serves until stdin closes."""
import datetime
import sys

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=600))
print(store.port, flush=True)
sys.stdin.read()
