"""One thin module per command, each a few named steps over a shared `Context`."""
