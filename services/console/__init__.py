"""The web console for on-call: the backlog, the calendar of future work, actions over a
filter, behind Identity-Aware Proxy (docs/console.md)."""
