"""The reports of a stream, merge, publish or reap round, as the commands print them and as `silt run` logs
each productive round: a summary line on stderr (a table of results on stdout for reap)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from siltlake.cli.output import Column, console, format_age, format_count, format_size, grid, out, shown

if TYPE_CHECKING:
    from siltlake.derived.reap import DerivedReapReport
    from siltlake.merge import MergeReport
    from siltlake.publish import PublishReport
    from siltlake.reap import ReapReport
    from siltlake.stream import StreamReport


def print_stream_report(report: StreamReport, staging_root: str, verbose: bool = True) -> None:
    def short(uri: str) -> str:
        return shown(uri[len(staging_root) + 1 :] if uri.startswith(staging_root + "/") else uri)

    working = report.seconds - report.spark_start_seconds
    rate = report.records_loaded / working if working > 0 else 0.0
    startup = f", of which Spark start-up {report.spark_start_seconds:.1f}s" if report.spark_start_seconds > 1 else ""
    console.print(
        f"[bold]stream[/]: {report.registered} new staging objects, {report.processed} processed, "
        f"{report.records_loaded:,} records loaded, {report.bad_records:,} bad records, "
        f"{len(report.unknown)} unknown objects, {report.live_objects} live + {report.delayed_objects} delayed "
        f"small objects, {report.seconds:.1f}s{startup} ({rate:,.0f} records/s)"
        # A round between the listings that catch missed notifications (stream.notified_listing_interval)
        + (
            f"; the queue only, the listing is due in {report.listing_waits:.0f}s"
            if report.listing_waits is not None
            else ""
        ),
        highlight=False,
    )
    if report.dropped_fields:
        console.print(
            f"  {report.dropped_fields:,} values of fields that are no column were dropped, from "
            f'{len(report.dropped_by_object)} objects (unknown_fields = "ignore"; add a column to keep '
            "them, `silt table add-column`)",
            highlight=False,
        )
    if report.skipped_duplicates:
        console.print(f"  {report.skipped_duplicates} objects were already committed by another process")
    if report.redelivered:
        console.print(f"  {report.redelivered} staging objects put again after they were registered: ignored")
    if report.expired:
        console.print(
            f"  {report.expired} staging objects arrived longer ago than stream.staging_retention: "
            "skipped, never loaded (delete them from the staging root)"
        )
    notices = report.notifications
    if notices is not None and (notices.messages or notices.error):
        console.print(
            f"  notifications: {notices.messages} messages, {notices.objects} objects under the staging "
            f"root ({report.notified} new), {notices.foreign} foreign, {notices.malformed} malformed "
            "(left in the queue)",
            highlight=False,
        )
        if notices.error:
            console.print(
                f"  [yellow]notification queue unavailable[/]: {shown(notices.error)}; this round relied "
                "on the listing",
                highlight=False,
            )
    for uri, loaded, size in report.changed_reputs:
        console.print(
            f"  [yellow]changed re-put[/] {short(uri)} is now {size:,} bytes but was loaded at {loaded:,}: "
            "a key is loaded once, so the new bytes are NOT loaded; put new data under a new key",
            highlight=False,
        )
    if report.appended:
        console.print(f"  {report.appended} appended staging files: their new bytes registered as new deliveries")
    for uri, reason in report.rewritten:
        console.print(f"  [red]rewritten in place[/] {short(uri)} {shown(reason)}", highlight=False)
    if report.unsettled:
        console.print(
            f"  {report.unsettled} staging files still being written wait to settle (oldest for "
            f"{format_age(report.unsettled_seconds)}; stream.settle_time)",
            highlight=False,
        )
    if not verbose:
        return
    for uri, reason in report.unknown:
        console.print(f"  [yellow]unknown[/] {short(uri)}: {shown(reason)}", highlight=False)
    for dropped in report.dropped_by_object[:5]:
        more = f" and {dropped.fields - len(dropped.names)} more" if dropped.fields > len(dropped.names) else ""
        console.print(
            f"  [yellow]dropped fields[/] {short(dropped.uri)}: {dropped.values:,} values of "
            f"{shown(', '.join(dropped.names))}{more} (not columns of {dropped.table})",
            highlight=False,
        )
    for uri, sample in report.bad_samples[:5]:
        console.print(f"  [yellow]bad record[/] {short(uri)} {shown(sample)}", highlight=False)
    if len(report.bad_samples) > 5:
        console.print(
            f'  ... {report.bad_records - 5} more bad records; with error_policy = "file" a '
            "table keeps them all (`silt errors list`)",
            highlight=False,
        )
    for uri, reason in report.failed:
        console.print(f"  [red]failed, will retry[/] {short(uri)}: {shown(reason)}", highlight=False)


def print_merge_report(report: MergeReport) -> None:
    modes = ", ".join(f"{mode} {count}" for mode, count in sorted(report.modes.items())) or "none"
    startup = f", of which Spark start-up {report.spark_start_seconds:.1f}s" if report.spark_start_seconds > 1 else ""
    in_driver = f"; {report.in_driver} small batches ran in-process, without Spark" if report.in_driver else ""
    outages = f", {report.outages} stopped by a storage outage (retried, not counted)" if report.outages else ""
    console.print(
        f"[bold]merge[/]: {report.claimed} jobs in {report.stages} Spark stages: {report.finished} finished, "
        f"{report.continuing} continuing, {report.failed} failed ({report.parked} parked){outages}, "
        f"{report.taken_over} taken over from dead workers; {report.objects_in:,} small objects "
        f"({format_size(report.bytes_in)}) into {format_size(report.bytes_out)}, {report.rows_out:,} rows; "
        f"modes: {modes}{in_driver}; {report.seconds:.1f}s{startup}",
        highlight=False,
    )
    for table, date, error in report.errors:
        console.print(f"  [red]failed[/] {table} {date}: {shown(error)}", highlight=False, soft_wrap=True)
    if report.parked:
        console.print(
            "  parked jobs stay in `silt status`; fix the cause, then `silt merge --retry-failed`", highlight=False
        )


def print_merge_schedule(scheduled: int, next_due, now) -> None:  # naive UTC datetimes
    """After `merge --once`: the jobs left for later, so "0 jobs" right after a stream is not a riddle."""
    if not scheduled:
        console.print("no merge jobs scheduled for later", highlight=False)
        return
    console.print(
        f"{scheduled} jobs scheduled for later (merge_interval or retry backoff), next due "
        f"{next_due:%Y-%m-%d %H:%M:%S} UTC (in {format_age((next_due - now).total_seconds())}); "
        "`silt merge --once --now` merges them now",
        highlight=False,
    )


def print_publish_report(report: PublishReport) -> None:
    console.print(
        f"[bold]publish[/]: {len(report.switched)} partitions switched, {len(report.closed)} closed, "
        f"{len(report.live_versions)} live versions, {len(report.merged_versions)} merged versions"
        + (
            f", {report.skipped_merged} merged versions left for the next run (merged meanwhile)"
            if report.skipped_merged
            else ""
        )
        + (f", {len(report.external)} external catalog changes" if report.external else "")
        + f"; {report.seconds:.1f}s",
        highlight=False,
    )
    for error in report.target_errors:  # retried by the next run
        console.print(f"[bold red]error:[/] {shown(error)}", highlight=False, soft_wrap=True)


REAP_COLUMNS = (
    Column("reason"),
    Column("objects", show=format_count, right=True),
    Column("size", show=format_size, right=True),
    Column("catalog rows"),
)


def print_reap_report(report: ReapReport) -> None:
    from siltlake.reap import REASONS

    title = "would delete (dry run)" if report.dry_run else "deleted"
    rows: list[tuple[str | Text, int | Text, int | Text, str]] = []
    for name, label, rows_of in REASONS:
        totals = report.reasons[name]
        rows.append((label, totals.objects, totals.bytes, f"{totals.rows:,} {rows_of}" if rows_of else ""))
    rows.append(
        (
            Text("total", style="bold"),
            Text(format_count(report.objects), style="bold"),
            Text(format_size(report.bytes), style="bold"),
            "",
        )
    )
    out.print(
        grid(REAP_COLUMNS, rows, title=f"reap {report.instance_key} at {report.now:%Y-%m-%d %H:%M:%S} UTC: {title}")
    )
    kept = [
        f"{count:,} {what}"
        for count, what in (
            (report.kept_young, "unreferenced objects inside the grace period"),
            (report.kept_running, "merged objects a running merge job may commit"),
            (report.kept_unreadable, "merged objects of a partition whose retained manifest is unreadable"),
        )
        if count
    ]
    sweep = "full sweep" if report.full_sweep else f"changed since the last run, {report.prefixes_listed:,} prefixes"
    console.print(
        f"listed {report.listed:,} objects ({sweep}); kept {', '.join(kept) or 'nothing unreferenced'}; "
        f"catalog {report.catalog_seconds:.2f}s, listing {report.list_seconds:.2f}s, deleting "
        f"{report.delete_seconds:.2f}s",
        highlight=False,
    )
    print_derived_reap(report.derived, report.dry_run)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {shown(warning)}", highlight=False, soft_wrap=True)
    for key, error in report.failed[:20]:
        console.print(
            f"[bold red]not deleted:[/] {shown(key)}: {shown(error)} (the next reap retries it)",
            highlight=False,
            soft_wrap=True,
        )


def print_derived_reap(derived: DerivedReapReport, dry_run: bool = False) -> None:
    """The derived reaper's decisions: a line per build it took off the active list or deleted, with the
    reason, and the builds it kept counted by reason."""
    from collections import Counter

    for build, why in derived.deactivated:
        console.print(
            f"derived build {build} {'would leave' if dry_run else 'left'} the active list: {why}",
            highlight=False,
            soft_wrap=True,
        )
    for build in derived.lost:
        console.print(
            f"derived build {build}: its builder is gone; {'would be ' if dry_run else ''}marked failed",
            highlight=False,
            soft_wrap=True,
        )
    for build, why in derived.deleted:
        console.print(
            f"derived build {build} {'would be deleted' if dry_run else 'deleted'}: {why}",
            highlight=False,
            soft_wrap=True,
        )
    if derived.deleted:
        console.print(
            f"derived builds: {len(derived.deleted)} {'to delete' if dry_run else 'deleted'}, "
            f"{derived.objects:,} objects, {format_size(derived.bytes)}",
            highlight=False,
        )
    kept = Counter(why for _, why in derived.kept)
    if kept:
        console.print(
            "derived builds kept: " + "; ".join(f"{count} {why}" for why, count in sorted(kept.items())),
            highlight=False,
            soft_wrap=True,
        )
