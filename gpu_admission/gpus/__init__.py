"""GPU facts about workloads: containers whose GPUs a scheduler gives (`scheduler_gpus.py`) and
GPU daemons the visibility policy would blind (`daemons.py`)."""
