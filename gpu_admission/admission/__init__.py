"""Facts about admission that the parts share: what one policy would do to one object
(`findings.py`), and the install's self-check, the objects expected against those installed
(`installed.py`)."""
