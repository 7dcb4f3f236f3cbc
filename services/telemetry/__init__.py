"""Telemetry: structured JSON logs for Cloud Logging (`log`) and the metrics the services report
(`metrics`). Standard library only, so every layer above the domain may import it.
"""
