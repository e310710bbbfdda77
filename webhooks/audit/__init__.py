"""What the policies would do to what a cluster already holds: one object (`objects.py`), a
workload through its templates (`workloads.py`), and a whole cluster read page by page
(`cluster.py`)."""
