"""Operating siltlake: Prometheus metrics read from the catalog (`metrics`), the metric history the daemons
sample (`history`), and the dashboard page with its server-drawn SVG charts (`dashboard`, `charts`).
docs/operations.md lists the metrics and example alerts."""
