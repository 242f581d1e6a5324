"""The shared single-GPU GCE lane (docs/rules.md, L1-L13): board, runner decisions, startup-script
contract."""
