"""Catalog tables of discovery and of files written in place: where each staging root's discovery stands, files
waiting to settle and appendable files' positions. Part of schema.metadata; all times are naive UTC."""

from __future__ import annotations

import sqlalchemy as sa

from siltlake.catalog.schema import metadata

# Where discovery of each staging root stands (stream/discover.py): every object whose ctime (or mtime) is
# before cursor_time was seen by a completed listing; full_listing_time is when the last full listing started.
discovery_cursors = sa.Table(
    "discovery_cursors",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("staging_root", sa.Text, nullable=False, unique=True),
    sa.Column("cursor_time", sa.DateTime, nullable=False),
    sa.Column("full_listing_time", sa.DateTime, nullable=False),
    # Staging rows of this root that arrived before expired_before may be pruned (catalog.staging.prune), so a
    # full listing skips objects older than it; expired_recorded is the reap run's `now` that set it.
    sa.Column("expired_before", sa.DateTime, nullable=True),
    sa.Column("expired_recorded", sa.DateTime, nullable=True),
    # An object store's rolling sweep (stream/discover_s3.py): the pass started at sweep_started has listed
    # every key up to sweep_after (raw, relative to the root; NULL: from the start).
    sa.Column("sweep_after", sa.Text, nullable=True),
    sa.Column("sweep_started", sa.DateTime, nullable=True),
    # The start of the last completed listing that looked every listed object up (0019): a local root's sweep
    # pass looks up only files changed since full_listing_time until stream.sweep_check_interval has passed.
    sa.Column("checked_time", sa.DateTime, nullable=True),
)

# The record of names a local staging root's walk keeps between runs that are not one process (`silt stream
# --once`; a daemon keeps its own in memory): per directory whose names a completed round accounted for, its
# identity ("device:inode:links"), its newest time (ns) and the names, zlib-compressed and joined by '/' (0020;
# storage/accounted.py, docs/design.md "A one-off run's record of names").
discovery_names = sa.Table(
    "discovery_names",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("staging_root", sa.Text, nullable=False),
    sa.Column("directory", sa.Text, nullable=False),
    sa.Column("identity", sa.String(80), nullable=False),
    sa.Column("newest_ns", sa.BigInteger, nullable=False),
    sa.Column("names", sa.LargeBinary, nullable=False),
    sa.UniqueConstraint("staging_root", "directory"),
)

# An object store's listing cursors (stream/discover_s3.py): per key prefix of a staging root, the key after
# which its next listing starts. kind 'stream' is a first-level prefix or a stream's prefix below one; 'recent'
# a day's prefix that received a key within stream.late_window (newest_put: the greatest LastModified seen).
prefix_cursors = sa.Table(
    "prefix_cursors",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("staging_root", sa.Text, nullable=False),
    sa.Column("prefix", sa.Text, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("start_after", sa.Text, nullable=False),
    sa.Column("newest_put", sa.DateTime, nullable=True),
    sa.UniqueConstraint("staging_root", "prefix"),
)

# Files of a local staging root seen still being written (docs/design.md, "Files written in place and appended
# to"): not registered until their content has not changed for stream.settle_time (or they waited
# stream.settle_limit). Each round looks at them again by key, so the discovery cursor never waits for them.
staging_waits = sa.Table(
    "staging_waits",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("staging_root", sa.Text, nullable=False),
    sa.Column("uri", sa.Text, nullable=False, unique=True),
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("change_time", sa.DateTime, nullable=False),  # the file's mtime when last looked at
    sa.Column("first_seen", sa.DateTime, nullable=False),
)
sa.Index("ix_staging_waits_staging_root", staging_waits.c.staging_root)

# Per appendable staging file (a local, uncompressed one), the "position file": how far its deliveries consumed
# it (whole records), the file's identity (device:inode) and a CRC-32 of the up to 4 KiB before consumed_end.
# pending_uri names the delivery of its tail registered and not committed yet (one at a time); state is
# "appending" or "rewritten" (stopped: changed in a way that cannot be told from a rewrite; reported once, never
# loaded again until `silt staging resume`).
staging_positions = sa.Table(
    "staging_positions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("staging_root", sa.Text, nullable=False),
    sa.Column("uri", sa.Text, nullable=False, unique=True),
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("table_id", sa.Integer, nullable=True),
    sa.Column("consumed_end", sa.BigInteger, nullable=True),
    sa.Column("read_end", sa.BigInteger, nullable=True),
    sa.Column("file_identity", sa.String(64), nullable=True),
    sa.Column("fingerprint", sa.BigInteger, nullable=True),
    sa.Column("pending_uri", sa.Text, nullable=True),
    sa.Column("state", sa.String(16), nullable=False, server_default="appending"),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("watch", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("change_time", sa.DateTime, nullable=False),
    # The file's identity beyond device:inode (revision 0022): the CRC-32 of its first head_length bytes (of the
    # decompressed stream for a compressed file), a token naming this file's deliveries, whether it was rotated
    # away (its trailing fragment is final), whether it is compressed, and where a fragment taken as final ended.
    sa.Column("head_crc", sa.BigInteger, nullable=True),
    sa.Column("head_length", sa.Integer, nullable=True),
    sa.Column("generation", sa.String(16), nullable=True),
    sa.Column("rotated", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("compressed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("fragment_end", sa.BigInteger, nullable=True),
)
sa.Index("ix_staging_positions_file_identity", staging_positions.c.file_identity)
sa.Index("ix_staging_positions_head_crc", staging_positions.c.head_crc)
sa.Index(
    "ix_staging_positions_watch",
    staging_positions.c.staging_root,
    staging_positions.c.watch,
    staging_positions.c.change_time,
)
sa.Index("ix_staging_positions_change_time", staging_positions.c.change_time)
