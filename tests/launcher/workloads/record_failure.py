"""Rank 1 raises through torch's @record, which writes TORCHELASTIC_ERROR_FILE; the others wait."""
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("learning rate must be positive, got -1")
    time.sleep(60)


if __name__ == "__main__":
    main()
