"""A table version's files under the table's column names where objects hold a renamed column under its old name
(docs/design.md "Renamed columns, read in place"). pyarrow's datasets read columns by name and cannot rename one
lazily (a dataset made of a stream of renamed batches is read whole into memory by its scanner), so RenamedDataset
offers a pyarrow dataset's reading methods over the files as they are: each scan projects the stored names under the
table's and its filter is bound to the columns by position (the stored schema keeps the table's order), so the files'
row groups are still skipped and nothing is held beyond the scanner's read-ahead."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

__all__ = ["RenamedDataset", "by_position"]


def by_position(expression: Any, schema: pa.Schema) -> Any | None:
    """The expression with its columns referred to by position in `schema` (through Substrait), or None where
    Substrait cannot carry it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.Expression.from_substrait(expression.to_substrait(schema))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


class RenamedDataset:
    """The methods of a pyarrow Dataset that read (schema, scanner, to_batches, to_table, count_rows, head, filter,
    and the Arrow stream protocol) over `parts` under the table's names; a keyed table's rows merged on read are
    held in memory and follow the files' rows. Not a pyarrow.dataset.Dataset: pyarrow cannot make one that renames
    lazily."""

    def __init__(self, parts: Any, filter: Any = None) -> None:  # pyarrow's word
        self.parts = parts  # siltlake.read.version_files.ArrowParts (not imported: versions makes these)
        self._filter = filter

    @property
    def schema(self) -> pa.Schema:
        return self.parts.schema

    @property
    def files(self) -> list[str]:
        return self.parts.plain.files

    def __repr__(self) -> str:
        return f"RenamedDataset({len(self.files)} files, renamed {self.parts.stored_names})"

    def filter(self, expression: Any) -> RenamedDataset:
        return RenamedDataset(self.parts, expression if self._filter is None else self._filter & expression)

    def _both(self, filter: Any) -> Any:
        if filter is None:
            return self._filter
        return filter if self._filter is None else self._filter & filter

    def scanner(self, columns: Sequence[str] | None = None, filter: Any = None, **options: Any) -> ds.Scanner:
        """A scanner of the files (not of the rows merged on read) under the table's names."""
        import pyarrow.dataset as ds

        if columns is not None and not all(isinstance(name, str) for name in columns):
            raise TypeError("RenamedDataset reads columns by name: give a list of the table's column names")
        condition = self._both(filter)
        stored = None if condition is None else by_position(condition, self.parts.schema)
        if condition is None or stored is not None:
            return ds.Scanner.from_dataset(
                self.parts.plain, columns=self.parts.renaming(columns), filter=stored, **options
            )
        # A filter Substrait cannot carry applies to the renamed stream.
        renamed = ds.Scanner.from_dataset(self.parts.plain, columns=self.parts.renaming(), **options).to_reader()
        return ds.Scanner.from_batches(renamed, filter=condition, columns=None if columns is None else list(columns))

    def _merged(self, columns: Sequence[str] | None, filter: Any) -> pa.Table | None:
        merged, condition = self.parts.merged, self._both(filter)
        if merged is None:
            return None
        if condition is not None:
            merged = merged.filter(condition)
        return merged if columns is None else merged.select(list(columns))

    def to_batches(
        self, columns: Sequence[str] | None = None, filter: Any = None, **options: Any
    ) -> Iterator[pa.RecordBatch]:
        scanner = self.scanner(columns, filter, **options)
        yield from scanner.to_batches()
        merged = self._merged(columns, filter)
        if merged is not None:
            yield from (batch.cast(scanner.projected_schema) for batch in merged.to_batches())

    def to_reader(
        self, columns: Sequence[str] | None = None, filter: Any = None, **options: Any
    ) -> pa.RecordBatchReader:
        import pyarrow as pa

        schema = self.scanner(columns, filter, **options).projected_schema
        return pa.RecordBatchReader.from_batches(schema, self.to_batches(columns, filter, **options))

    def to_table(self, columns: Sequence[str] | None = None, filter: Any = None, **options: Any) -> pa.Table:
        import pyarrow as pa

        scanned = self.scanner(columns, filter, **options).to_table()
        merged = self._merged(columns, filter)
        return scanned if merged is None else pa.concat_tables([scanned, merged.cast(scanned.schema)])

    def count_rows(self, filter: Any = None, **options: Any) -> int:
        merged = self._merged(None, filter)
        return self.scanner(None, filter, **options).count_rows() + (0 if merged is None else merged.num_rows)

    def head(self, num_rows: int, columns: Sequence[str] | None = None, filter: Any = None, **options: Any) -> pa.Table:
        return _head(self.to_reader(columns, filter, **options), num_rows)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.to_reader().__arrow_c_stream__(requested_schema)


def _head(reader: pa.RecordBatchReader, num_rows: int) -> pa.Table:
    import pyarrow as pa

    batches, left = [], num_rows
    for batch in reader:
        if left <= 0:
            break
        batches.append(batch.slice(0, left))
        left -= batches[-1].num_rows
    return pa.Table.from_batches(batches, reader.schema)
