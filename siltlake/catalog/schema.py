"""Catalog tables (docs/design.md, "Catalog"). All times are naive UTC. Migrations must produce exactly this."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# Partial indexes and their conditions. The condition is given to the PostgreSQL dialect only when a catalog on
# PostgreSQL opens (postgresql_index_options): naming it at import would load that dialect (about 0.1 s of
# start-up) into every command, SQLite catalogs' included.
_POSTGRESQL_WHERE: dict[sa.Index, sa.ColumnElement] = {}


def partial_index(name: str, *columns: sa.Column, where: sa.ColumnElement, unique: bool = False) -> sa.Index:
    """An index of the rows where `where` holds (SQLite and PostgreSQL)."""
    index = sa.Index(name, *columns, unique=unique, sqlite_where=where)
    _POSTGRESQL_WHERE[index] = where
    return index


def postgresql_index_options() -> None:
    """Give the partial indexes their PostgreSQL condition (migrations and schema comparisons render it)."""
    for index, where in _POSTGRESQL_WHERE.items():
        index.dialect_options["postgresql"]["where"] = where


# Names the PostgreSQL advisory lock that orders small object commits (and partition closes).
SMALL_OBJECT_LOCK = 0x5117_1A4E

# PostgreSQL hands out small object ids from a sequence so an aborted commit never reuses one.
small_object_id_seq = sa.Sequence("small_object_id_seq", metadata=metadata)

instances = sa.Table(
    "instances",
    metadata,
    sa.Column("instance_key", sa.String(32), primary_key=True),
    sa.Column("is_self", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("storage_root", sa.Text, nullable=False),
    # is_self row: this catalog's random id (catalog.instances.catalog_id); others: the catalog their marker names.
    sa.Column("description", sa.Text, nullable=False, server_default=""),
    sa.Column("registered_time", sa.DateTime, nullable=False),
)

tables = sa.Table(
    "tables",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("schema_name", sa.String(63), nullable=False),
    sa.Column("table_name", sa.String(63), nullable=False),
    sa.Column("physical_schema_name", sa.String(63), nullable=False),
    sa.Column("physical_table_name", sa.String(63), nullable=False),
    sa.Column("create_time", sa.DateTime, nullable=False),
    sa.Column("merge_interval", sa.Integer, nullable=False),
    sa.Column("time_column", sa.String(63), nullable=False),
    sa.Column("timezone", sa.String(64), nullable=False),
    sa.Column("ttl_days", sa.Integer, nullable=True),
    sa.Column("definition", sa.Text, nullable=False),
    sa.Column("dropped_time", sa.DateTime, nullable=True),
    # The table's newest table version: bumped by each catalog commit that publishes versions of its partitions.
    sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
    # That version's time: the next one is stamped after it (CatalogCore.new_table_versions).
    sa.Column("version_time", sa.DateTime, nullable=True),
    # Its switched partitions (0018), kept by the switch and by reap: merge status counts the others only.
    sa.Column("switched_partitions", sa.BigInteger, nullable=False, server_default="0"),
    # The oldest table version every partition can still show (0021): moved forward by reap as it deletes versions.
    sa.Column("readable_from", sa.BigInteger, nullable=False, server_default="1"),
    sa.UniqueConstraint("physical_schema_name", "physical_table_name"),
    sa.CheckConstraint("merge_interval >= 0", name="merge_interval"),
)
partial_index(
    "uq_tables_live_name", tables.c.schema_name, tables.c.table_name, unique=True, where=tables.c.dropped_time.is_(None)
)

staging_objects = sa.Table(
    "staging_objects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("uri", sa.Text, nullable=False, unique=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id"), nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("send_time", sa.DateTime, nullable=True),
    sa.Column("receive_time", sa.DateTime, nullable=False),
    sa.Column("processed_time", sa.DateTime, nullable=True),
    sa.Column("records_in", sa.BigInteger, nullable=True),
    sa.Column("bad_records", sa.BigInteger, nullable=True),
    sa.Column("error_uri", sa.Text, nullable=True),
    # Failed processing attempts (an exception outside any one record): past stream.max_failures the object
    # moves to unknown with last_failure as its reason.
    sa.Column("failure_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_failure", sa.Text, nullable=True),
    sa.Column("last_failure_time", sa.DateTime, nullable=True),
    # The stream daemon decoding it (claim_owner, its host and pid) and its last heartbeat: other daemons
    # leave it alone while the claim is fresh, so each object is decoded once; the processed mark, not the
    # claim, keeps a commit exactly-once.
    sa.Column("claim_owner", sa.String(64), nullable=True),
    sa.Column("claim_host", sa.String(255), nullable=True),
    sa.Column("claim_pid", sa.Integer, nullable=True),
    sa.Column("claim_time", sa.DateTime, nullable=True),
)
partial_index("ix_staging_objects_pending", staging_objects.c.id, where=staging_objects.c.processed_time.is_(None))
# Reap prunes processed rows by their arrival (catalog.staging.prune), reading only the expired range; the
# metric history sums what was processed in each slot (catalog.observations.activity) by processed_time.
sa.Index("ix_staging_objects_receive_time", staging_objects.c.receive_time)
sa.Index("ix_staging_objects_processed_time", staging_objects.c.processed_time)

# Running totals per table of every staging row ever registered (objects) and what processing counted (records
# in, bad records), pruned rows included: kept by each write of staging rows in its own transaction, so the
# metrics and `silt status` read one row per table, not the staging rows.
staging_totals = sa.Table(
    "staging_totals",
    metadata,
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id"), primary_key=True, autoincrement=False),
    sa.Column("objects", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("records_in", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("bad_records", sa.BigInteger, nullable=False, server_default="0"),
)

unknown_staging_objects = sa.Table(
    "unknown_staging_objects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("uri", sa.Text, nullable=False, unique=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id"), nullable=True),
    sa.Column("size", sa.BigInteger, nullable=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("detect_time", sa.DateTime, nullable=False),
)

partitions = sa.Table(
    "partitions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id"), nullable=False),
    sa.Column("partition_date", sa.Date, nullable=False),
    # The values of the table's partition_by fields below dt, as their path (siltlake.partspec); "" for dt alone.
    sa.Column("partition_values", sa.Text, nullable=False, server_default=""),
    sa.Column("current_manifest_version", sa.BigInteger, nullable=False, server_default="-1"),
    sa.Column("desired_manifest_version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("last_live_object_id", sa.BigInteger, nullable=True),
    sa.Column("switched", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("create_time", sa.DateTime, nullable=False),
    sa.UniqueConstraint("table_id", "partition_date", "partition_values"),
    sa.CheckConstraint("current_manifest_version >= -1", name="current_version"),
)

small_objects = sa.Table(
    "small_objects",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("staging_object_id", sa.Integer, sa.ForeignKey("staging_objects.id"), nullable=False),
    sa.Column("partition_id", sa.Integer, sa.ForeignKey("partitions.id"), nullable=False),
    sa.Column("delayed", sa.Boolean, nullable=False),
    sa.Column("content_length", sa.BigInteger, nullable=False),
    sa.Column("row_count", sa.BigInteger, nullable=False),
    sa.Column("min_event_time", sa.DateTime, nullable=False),
    sa.Column("max_event_time", sa.DateTime, nullable=False),
    sa.Column("upload_start_time", sa.DateTime, nullable=False),
    sa.UniqueConstraint("staging_object_id", "partition_id"),
)
sa.Index("ix_small_objects_partition_id_id", small_objects.c.partition_id, small_objects.c.id)
# Lineage of an object the stream wrote for several staging objects at once (one per wave, table and date): each
# source's rows are the object's rows [first_row, first_row + row_count), in the order of its own file. An object
# written for one staging object has no rows here (small_objects.staging_object_id is its whole lineage).
small_object_sources = sa.Table(
    "small_object_sources",
    metadata,
    sa.Column("small_object_id", sa.BigInteger, sa.ForeignKey("small_objects.id"), primary_key=True),
    sa.Column("staging_object_id", sa.Integer, sa.ForeignKey("staging_objects.id"), primary_key=True),
    sa.Column("first_row", sa.BigInteger, nullable=False),
    sa.Column("row_count", sa.BigInteger, nullable=False),
)
sa.Index("ix_small_object_sources_staging_object_id", small_object_sources.c.staging_object_id)
# Incremental reap finds the partitions that changed since its last run by these times (catalog.reaping).
sa.Index("ix_partitions_create_time", partitions.c.create_time)
# The partitions a publish run can change, few whatever the table's length: open ones (close), not switched
# ones (switch, live versions), and switched ones behind their desired merged version.
partial_index(
    "ix_partitions_table_id_partition_date_open",
    partitions.c.table_id,
    partitions.c.partition_date,
    where=partitions.c.last_live_object_id.is_(None),
)
partial_index("ix_partitions_id_not_switched", partitions.c.id, where=partitions.c.switched.is_(False))
partial_index(
    "ix_partitions_id_behind",
    partitions.c.id,
    where=partitions.c.current_manifest_version < partitions.c.desired_manifest_version,
)
# The history sample's freshness reads the small objects uploaded since a day before its slot.
sa.Index("ix_small_objects_upload_start_time", small_objects.c.upload_start_time)

merge_jobs = sa.Table(
    "merge_jobs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("partition_id", sa.Integer, sa.ForeignKey("partitions.id"), nullable=False),
    sa.Column("schedule_time", sa.DateTime, nullable=False),
    sa.Column("ongoing_mark", sa.Integer, nullable=False, server_default="0"),
    sa.Column("heartbeat_time", sa.DateTime, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    # Who holds a running job: refreshed heartbeats and the final commit are guarded by it, so a
    # worker whose job was taken over can no longer touch it.
    sa.Column("owner", sa.String(64), nullable=True),
    # The holder's host and pid: on the same host, a claim whose process is gone is stale at once.
    sa.Column("owner_host", sa.String(255), nullable=True),
    sa.Column("owner_pid", sa.Integer, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("continued_from", sa.Integer, nullable=True),  # the job whose leftovers this one takes
    # ongoing_mark: 0 waiting, the job's own id while running, minus its id once parked as failed.
    sa.UniqueConstraint("partition_id", "ongoing_mark"),
    sqlite_autoincrement=True,
)
partial_index("ix_merge_jobs_waiting", merge_jobs.c.schedule_time, where=merge_jobs.c.ongoing_mark == 0)

merge_job_log = sa.Table(
    "merge_job_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("job_id", sa.Integer, nullable=False),
    sa.Column("partition_id", sa.Integer, sa.ForeignKey("partitions.id"), nullable=False),
    sa.Column("mode", sa.String(16), nullable=True),
    sa.Column("objects_in", sa.Integer, nullable=False, server_default="0"),
    sa.Column("bytes_in", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("bytes_out", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("start_time", sa.DateTime, nullable=False),
    sa.Column("end_time", sa.DateTime, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("rows_out", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("bytes_decoded", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("note", sa.Text, nullable=True),
    sa.CheckConstraint("outcome IN ('finished', 'continuing', 'failed')", name="outcome"),
)
sa.Index("ix_merge_job_log_end_time", merge_job_log.c.end_time)

merge_ranges = sa.Table(
    "merge_ranges",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("partition_id", sa.Integer, sa.ForeignKey("partitions.id"), nullable=False),
    sa.Column("lower_bound", sa.BigInteger, nullable=True),
    sa.Column("upper_bound", sa.BigInteger, nullable=False),
    sa.Column("content_length", sa.BigInteger, nullable=False),
    sa.Column("row_count", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("create_time", sa.DateTime, nullable=False),
    sa.Column("update_time", sa.DateTime, nullable=False),
    # Null: the object is TableLayout.merged_object(lower, upper). An update's output is named here
    # instead, so it never overwrites an object an older version's manifest still lists.
    sa.Column("object_key", sa.Text, nullable=True),
    sa.UniqueConstraint("partition_id", "lower_bound"),
    sa.UniqueConstraint("partition_id", "upper_bound"),
    # Each range starts where the previous one ends; the sentinel (null, 0) anchors the chain.
    sa.ForeignKeyConstraint(
        ["partition_id", "lower_bound"],
        ["merge_ranges.partition_id", "merge_ranges.upper_bound"],
        name="fk_merge_ranges_chain",
    ),
    sa.CheckConstraint("upper_bound > lower_bound", name="bounds_increase"),
    sa.CheckConstraint("lower_bound IS NOT NULL OR upper_bound = 0", name="sentinel"),
)
sa.Index("ix_merge_ranges_update_time", merge_ranges.c.update_time)

partition_versions = sa.Table(
    "partition_versions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("partition_id", sa.Integer, sa.ForeignKey("partitions.id"), nullable=False),
    # The partition's table (revision 0018): a table's versions by table version, for publish targets that
    # read what is new since they last synced.
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id"), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("commit_op", sa.String(16), nullable=False),
    sa.Column("live_watermark", sa.BigInteger, nullable=True),
    sa.Column("manifest_key", sa.Text, nullable=True),
    # The largest small object id the manifest holds (null without one): live objects above it, up to
    # live_watermark, are shown beside the manifest (an append after an update).
    sa.Column("covered_upper", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("row_count", sa.BigInteger, nullable=False),
    sa.Column("byte_count", sa.BigInteger, nullable=False),
    # The table version this partition version was published in (tables.version at its commit).
    sa.Column("table_version", sa.BigInteger, nullable=False, server_default="0"),
    # The manifest listing exactly this version's data files (merged, updated and small objects alike); null
    # for live versions published before revision 0006, whose files readers compute from the catalog.
    sa.Column("file_list_key", sa.Text, nullable=True),
    # The derived table build that published this version (null for other tables): what the derived
    # reaper checks before deleting a build (derived_builds.id).
    sa.Column("build_id", sa.Integer, nullable=True),
    sa.UniqueConstraint("partition_id", "version"),
    sa.CheckConstraint("commit_op IN ('append', 'compaction', 'update', 'merge')", name="commit_op"),
    sa.CheckConstraint("live_watermark IS NOT NULL OR manifest_key IS NOT NULL", name="shows_something"),
)
sa.Index("ix_partition_versions_created_at", partition_versions.c.created_at)
sa.Index(
    "ix_partition_versions_table_id_table_version", partition_versions.c.table_id, partition_versions.c.table_version
)

# SQLite has no sequences; this row plays the role of small_object_id_seq there.
id_counters = sa.Table(
    "id_counters",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("last_value", sa.BigInteger, nullable=False),
)

# What each external catalog (publish target, e.g. "hive") was last told, so a publish run issues DDL
# only for what changed: the name a table was created under (renames), its columns and types (added or
# widened columns), and which published state each partition points at (live objects or a manifest).
external_tables = sa.Table(
    "external_tables",
    metadata,
    sa.Column("target", sa.String(32), primary_key=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("database_name", sa.String(128), nullable=False),
    sa.Column("table_name", sa.String(128), nullable=False),
    sa.Column("columns", sa.Text, nullable=False),  # JSON [[name, type], ...] in table order
    sa.Column("sync_time", sa.DateTime, nullable=False),
    # The table version whose partitions the target points at (0018): a run reads only newer versions.
    sa.Column("synced_version", sa.BigInteger, nullable=False, server_default="0"),
    # The table version a run set out to sync: above synced_version, that run died part way (its target
    # calls may or may not have happened), and the next asks the target what it has.
    sa.Column("syncing_version", sa.BigInteger, nullable=False, server_default="0"),
)

external_partitions = sa.Table(
    "external_partitions",
    metadata,
    sa.Column("target", sa.String(32), primary_key=True),
    sa.Column("partition_id", sa.Integer, sa.ForeignKey("partitions.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("manifest_key", sa.Text, nullable=True),  # the shown version's manifest; null: live objects
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("sync_time", sa.DateTime, nullable=False),
)

# Partitions reap removed that a target pointed at (0018): the target drops them and deletes the row, so a run
# reads what was removed since the last one, not the target's whole list.
external_removals = sa.Table(
    "external_removals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("target", sa.String(32), nullable=False),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id", ondelete="CASCADE"), nullable=False),
    sa.Column("partition_date", sa.Date, nullable=False),
    sa.Column("partition_values", sa.Text, nullable=False, server_default=""),  # partitions.partition_values
)
sa.Index("ix_external_removals_target_table_id", external_removals.c.target, external_removals.c.table_id)

# Derived tables (docs/design.md): a table (tables row, kind "derived") whose partitions are built from a query.
derived_tables = sa.Table(
    "derived_tables",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id"), nullable=False, unique=True),
    sa.Column("definition", sa.Text, nullable=False),  # DerivedDef JSON
    sa.Column("definition_hash", sa.String(64), nullable=False),
    sa.Column("sources", sa.Text, nullable=False),  # JSON list of source table ids, in query order
    sa.Column("create_time", sa.DateTime, nullable=False),
)

# One row per build; a build writes under _derived/<name>/ of the lake (name: <reg_key>-<hash>).
derived_builds = sa.Table(
    "derived_builds",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("derived_id", sa.Integer, sa.ForeignKey("derived_tables.id"), nullable=False),
    sa.Column("name", sa.String(96), nullable=False, unique=True),
    sa.Column("reg_key", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("owner_host", sa.String(255), nullable=False),
    sa.Column("owner_pid", sa.Integer, nullable=False),
    sa.Column("start_time", sa.DateTime, nullable=False),
    sa.Column("heartbeat_time", sa.DateTime, nullable=False),
    sa.Column("end_time", sa.DateTime, nullable=True),
    # JSON {source table id: {"version": table version, "dates": {date: partition version}}}: what it read
    # (for an incremental build, merged with what earlier builds read of the dates it did not rebuild).
    sa.Column("source_state", sa.Text, nullable=True),
    sa.Column("trigger_value", sa.Text, nullable=True),
    sa.Column("dates_written", sa.Integer, nullable=False, server_default="0"),
    sa.Column("rows_written", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("bytes_written", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("error", sa.Text, nullable=True),
    sa.CheckConstraint("status IN ('building', 'published', 'failed')", name="status"),
    sa.CheckConstraint("kind IN ('full', 'incremental')", name="kind"),
    sqlite_autoincrement=True,
)
# At most one build of a derived table runs at a time.
partial_index(
    "uq_derived_builds_building", derived_builds.c.derived_id, unique=True, where=derived_builds.c.status == "building"
)

# Looker's active_derived_tables: the builds that are current. The reaper refreshes it, then deletes this
# deployment's builds that are in neither it nor a retained version.
active_derived_builds = sa.Table(
    "active_derived_builds",
    metadata,
    sa.Column("build_id", sa.Integer, sa.ForeignKey("derived_builds.id"), primary_key=True),
    sa.Column("derived_id", sa.Integer, sa.ForeignKey("derived_tables.id"), nullable=False),
    sa.Column("expire_time", sa.DateTime, nullable=True),  # persist_for: when it stops being active
    sa.Column("activate_time", sa.DateTime, nullable=False),
)

# Samples of what the dashboard charts (siltlake.observe.history): one row per table and sample slot, written by
# whichever daemon samples that slot first, pruned by reap after observe.history_retention.
metric_history = sa.Table(
    "metric_history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("sample_time", sa.DateTime, nullable=False),
    sa.Column("table_name", sa.String(127), nullable=False),
    sa.Column("pending_objects", sa.BigInteger, nullable=True),
    sa.Column("pending_bytes", sa.BigInteger, nullable=True),
    sa.Column("unmerged_objects", sa.BigInteger, nullable=True),
    sa.Column("unmerged_bytes", sa.BigInteger, nullable=True),
    sa.Column("merged_objects", sa.BigInteger, nullable=True),  # merged in the slot (merge_job_log)
    sa.Column("merged_bytes", sa.BigInteger, nullable=True),
    sa.Column("records_loaded", sa.BigInteger, nullable=True),  # loaded in the slot
    sa.Column("bad_records", sa.BigInteger, nullable=True),
    sa.Column("freshness_p50_seconds", sa.Float, nullable=True),  # of the objects first shown in the slot
    sa.Column("freshness_p99_seconds", sa.Float, nullable=True),
    sa.Column("freshness_max_seconds", sa.Float, nullable=True),
    sa.Column("jobs_waiting", sa.Integer, nullable=True),
    sa.Column("jobs_running", sa.Integer, nullable=True),
    sa.Column("jobs_failed", sa.Integer, nullable=True),
    sa.UniqueConstraint("sample_time", "table_name"),
)
sa.Index("ix_metric_history_sample_time", metric_history.c.sample_time)

# Completed reap runs (docs/design.md, "Incremental runs"): the next run lists only what changed since the newest
# one, and a full sweep runs when none of them within reap.full_sweep_interval was full.
reap_runs = sa.Table(
    "reap_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_time", sa.DateTime, nullable=False),  # the run's `now`: its catalog view's moment
    sa.Column("full_sweep", sa.Boolean, nullable=False),
    sa.Column("retention", sa.Integer, nullable=False),  # seconds: the next run finds versions crossing it
    sa.Column("max_small_object_id", sa.BigInteger, nullable=False),
    sa.Column("finished_time", sa.DateTime, nullable=False),
)
sa.Index("ix_reap_runs_run_time", reap_runs.c.run_time)

# Changes to a table's definition that publish no data (`silt table set`): each is a table version of its own,
# shown by `silt history` beside the partition versions (docs/design.md "Table properties that change").
table_changes = sa.Table(
    "table_changes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id", ondelete="CASCADE"), nullable=False),
    sa.Column("table_version", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("op", sa.String(16), nullable=False),
    sa.Column("detail", sa.Text, nullable=False),  # what changed, as the user would write it: ttl_days=30 ...
    sa.Column("definition", sa.Text, nullable=False),  # the table definition from this version on
    # The definition before it (time travel reads a version with its own definition); NULL before revision 0024.
    sa.Column("previous_definition", sa.Text, nullable=True),
    sa.UniqueConstraint("table_id", "table_version"),
)

# Request ids of writes (Table.append/upsert/delete/update/restore, `--request-id`) whose commits are done, written in
# the commit's own transaction: a retry finds its id and changes nothing (docs/design.md "Request ids and restore").
# Reap prunes rows older than reap.request_id_retention.
applied_requests = sa.Table(
    "applied_requests",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id", ondelete="CASCADE"), nullable=False),
    sa.Column("request_id", sa.String(200), nullable=False),
    sa.Column("operation", sa.String(16), nullable=False),
    sa.Column("table_version", sa.BigInteger, nullable=True),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.UniqueConstraint("table_id", "request_id"),
)
sa.Index("ix_applied_requests_created_at", applied_requests.c.created_at)

# The merge queue's fair shares (0023; docs/design.md "Merge", Fairness): when each level (a schema, a table) was
# last given a job, as a turn number, so a claim serves the levels that waited longest first. The row with level ""
# holds the last turn handed out.
merge_shares = sa.Table(
    "merge_shares",
    metadata,
    sa.Column("level", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("last_turn", sa.BigInteger, nullable=False),
)

# Settings a schema gives the tables in it that do not set them themselves (0023; `silt schema set`): the value as
# JSON. docs/design.md "Settings inherited".
schema_settings = sa.Table(
    "schema_settings",
    metadata,
    sa.Column("schema_name", sa.String(63), primary_key=True),
    sa.Column("key", sa.String(32), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

# Names given to table versions (0025; Table.tag, `silt table tag`): read as as_of_version="name" and
# VERSION AS OF 'name'; reap keeps every partition version a tagged table version shows.
version_tags = sa.Table(
    "version_tags",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("table_id", sa.Integer, sa.ForeignKey("tables.id", ondelete="CASCADE"), nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("table_version", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.UniqueConstraint("table_id", "name"),
)
