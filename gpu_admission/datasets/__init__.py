"""Datasets, decided once for every reader: a PVC's data source (`source.py`), its load
(`load.py`), its digest (`digests.py`), its shards (`parallelism.py`) and the loader's progress
line (`progress.py`)."""
