"""The HTTPS service: the aiohttp application and its handlers (`server.py`), the memo of answers
to pods of one template (`memo.py`), and the drain on shutdown (`draining.py`)."""
