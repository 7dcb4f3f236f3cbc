"""The whole system on one machine: emulators, scan, worker, a local scheduler and a demo.

`python -m services.local` (what `make run` runs) starts it and stops it cleanly on Ctrl-C.
"""
