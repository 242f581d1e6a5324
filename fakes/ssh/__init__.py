"""The fake ssh program: replays recordings/ssh/ for the fake box it is pointed at (README.md)."""
