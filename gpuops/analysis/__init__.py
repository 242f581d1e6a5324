"""Learning from the event log: stats, shrunk pass rates, off-policy evaluation."""
