"""The configuration: one model (`model.py`) and its sections, read from a file or a folder of
layers (`files.py`), `GPU_ADMISSION_*` variables (`environ.py`) and flags; each policy's mode
(`policy_modes.py`); and the reference generated from it (`reference.py`)."""
