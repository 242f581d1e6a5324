"""Stateful provider fakes that replay recorded raw output (fakes/README.md); ssh/ is the first."""
