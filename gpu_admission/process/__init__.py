"""Each process's own machinery, whatever it serves: logging, Prometheus metrics, the HTTP
probes, the event loop and how late it runs, the heap kept from full collections, stop signals,
and failures said once however often they retry."""
