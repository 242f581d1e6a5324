"""The shared single-GPU GCE lane (seeds/000): board, runner decisions, startup-script contract."""
