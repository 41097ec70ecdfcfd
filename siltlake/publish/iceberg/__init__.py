"""The Apache Iceberg publish target (docs/design.md, "Iceberg target"): the target itself (target), its catalog
and commits (catalog), what a snapshot holds of siltlake's table versions (snapshots), data and delete files
(datafiles, deletes), manifests (manifests), tags (tags), following each write at once (follow), reap (reap) and
the REST catalog server (rest)."""
