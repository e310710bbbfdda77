"""The loader: what `gpu-admission load` runs inside a loader Job. Copy engines (rclone for
object stores and the web, huggingface_hub for the Hub), the shard partition, the JSON summary
and progress the controller reads, the digest check and each backend's settings. Only the
entry points (`commands/`) import it; it uses the foundation alone."""
