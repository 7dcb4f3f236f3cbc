"""The Pulumi program of Deferred Jobs: one stack per environment (Pulumi.<stack>.yaml).

`__main__.py` only wires: it loads the stack configuration (`config.py`) and calls
`program.build`, which creates the resources defined in the other modules.
"""
