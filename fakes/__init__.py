"""Stateful provider fakes that replay recorded raw output (docs/fakes.md)."""
