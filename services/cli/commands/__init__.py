"""The `jobsctl` commands, one module per noun; each has `register(commands, common)`."""
