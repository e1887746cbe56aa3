"""python -m ddprun: the launcher with this Python as the workers' interpreter."""
from ddprun import main

main()
