"""A local Cloud Storage emulator: the PyPI `gcp-storage-emulator`, in memory, on 127.0.0.1, serving
concurrent connections."""
