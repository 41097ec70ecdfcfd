"""The Iceberg entry (a pyiceberg DataFile) of one of siltlake's objects, registered as it is (docs/design.md, "Iceberg
target"): its statistics from the Parquet footer, its partition record given (its date and values below dt:
siltlake.publish.iceberg.partitioning). An upsert's object carries the delete marker
column, which no Iceberg field is (engines read it by field id and never see it; its rows are hidden by the
partition's position delete file, siltlake.publish.iceberg.deletes): counted under an id no field has, then left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from siltlake.records.keyed import DELETE_MARKER

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from siltlake.storage.filesystem import Storage

# Above every column id a table gives, below the ids Iceberg reserves for its metadata columns.
MARKER_ID = 2_000_000_000
NAME_MAPPING = "schema.name-mapping.default"


def registered_file(
    lake: Storage, key: str, table: IcebergTable, path: str, partition: Any, size: int | None
) -> Any:  # a pyiceberg Record in, a DataFile out
    """The DataFile of the object at lake key `key` (Iceberg path `path`, `size` bytes or None: read it here), in
    the partition `partition` (a record of the table's spec)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    with lake.filesystem.open_input_file(lake.path(key)) as stream:
        footer = pq.read_metadata(stream)
        size = size if size is not None else stream.size()
    schema = table.schema()
    stored = footer.schema.to_arrow_schema()
    marked = DELETE_MARKER in stored.names
    if marked:
        stored = stored.remove(stored.get_field_index(DELETE_MARKER))
    counts_only = {**table.properties, "write.metadata.metrics.default": "counts"}
    if set(stored.names) - {*schema.column_names}:
        # Columns under names the table no longer gives them (renamed, dropped): mapped by the file's own
        # field ids; counts only, its bounds may be of a narrower type.
        statistics = _statistics(footer, pyarrow_to_schema(stored), counts_only, marked)
        return _registered(table, path, partition, size, statistics)
    try:
        statistics = _statistics(footer, schema, table.properties, marked)
    except (ValueError, KeyError, TypeError):
        # A file written before a column was widened: its bounds are of the narrower type; counts only.
        statistics = _statistics(footer, schema, counts_only, marked)
    return _registered(table, path, partition, size, statistics)


def _statistics(footer: Any, schema: Any, properties: dict[str, str], marked: bool) -> Any:
    """PyIceberg's statistics of the footer's columns (`schema`'s fields, and the delete marker when `marked`)."""
    from pyiceberg.io.pyarrow import (
        MetricModeTypes,
        MetricsMode,
        StatisticsCollector,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.types import BooleanType

    plan = compute_statistics_plan(schema, properties)
    mapping = parquet_path_to_id_mapping(schema)
    if marked:
        plan[MARKER_ID] = StatisticsCollector(
            field_id=MARKER_ID,
            iceberg_type=BooleanType(),
            mode=MetricsMode(MetricModeTypes.NONE),
            column_name=DELETE_MARKER,
        )
        mapping[DELETE_MARKER] = MARKER_ID
    statistics = data_file_statistics_from_parquet_metadata(footer, plan, mapping)
    for counted in (statistics.column_sizes, statistics.value_counts, statistics.null_value_counts):
        counted.pop(MARKER_ID, None)
    return statistics


def marker_mapping(table: IcebergTable) -> dict[str, str]:
    """A keyed table's name mapping with the delete marker under MARKER_ID: an upsert's object holds the marker
    without a field id, and PyIceberg reads a file with any column lacking one through the name mapping (where a
    name it cannot map fails the read); the id is no field's, so the column is never read."""
    from pyiceberg.table.name_mapping import MappedField, NameMapping, create_mapping_from_schema

    text = table.properties.get(NAME_MAPPING)
    mapping = NameMapping.model_validate_json(text) if text else create_mapping_from_schema(table.schema())
    if any(DELETE_MARKER in field.names for field in mapping):
        return {NAME_MAPPING: text} if text else {}
    marker = MappedField(field_id=MARKER_ID, names=[DELETE_MARKER])  # type: ignore[call-arg]  # field-id's name
    return {NAME_MAPPING: NameMapping([*mapping, marker]).model_dump_json()}


def _registered(table: IcebergTable, path: str, partition: Any, size: int, statistics: Any) -> Any:
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=size,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    # from_args drops spec_id (PyIceberg 0.12): set it, or removing this file later in the same run (a
    # catch-up over several versions) fails on the missing attribute.
    data_file.spec_id = table.metadata.default_spec_id
    return data_file
