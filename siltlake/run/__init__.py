"""siltlake run: the daemons' loops in one process on one host (single_host)."""
