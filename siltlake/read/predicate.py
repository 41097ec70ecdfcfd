"""One predicate for reads (docs/design.md "One scan, one predicate"): SQL boolean text (Spark's syntax, parsed once
by sqlglot) or a pyarrow expression, checked against the table's columns the same way, as a pyarrow expression
(pyarrow, Polars, the days a read plans) and, from text, a DuckDB condition rendered here (never the user's text)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from siltlake.errors import SiltError, did_you_mean

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlglot import exp

__all__ = ["Predicate", "predicate_of"]

SUPPORTED = (
    "comparisons, AND, OR, NOT, IN, BETWEEN, IS [NOT] NULL, [I]LIKE, + - *, lower, upper, length, abs, "
    "coalesce, DATE '...' and TIMESTAMP '...'"
)
_NO_FIELD = re.compile(r"No match for FieldRef\.Name\((.*?)\)")


@dataclass(frozen=True)
class Predicate:
    """A read's filter: `arrow` over the table's column names; `stored` the same over the names objects hold the
    columns by (None: pyarrow cannot say it that way, so it applies after the columns are renamed); `duckdb` a
    DuckDB condition over the table's names (None: given as a pyarrow expression, which DuckDB reads through
    pyarrow's scan); `conditions` the sqlglot trees of the parts given as text (all hold: buckets are pruned by
    them, siltlake.read.partition_prune)."""

    text: str
    arrow: Any
    stored: Any | None
    duckdb: str | None
    conditions: tuple[Any, ...] = ()

    def and_(self, other: Predicate) -> Predicate:
        stored = None if self.stored is None or other.stored is None else self.stored & other.stored
        duck = None if self.duckdb is None or other.duckdb is None else f"({self.duckdb}) AND ({other.duckdb})"
        return Predicate(
            f"({self.text}) AND ({other.text})",
            self.arrow & other.arrow,
            stored,
            duck,
            self.conditions + other.conditions,
        )


def predicate_of(value: Any, table: str, schema: pa.Schema, stored_names: Mapping[str, str]) -> Predicate:
    """The predicate of `value` (SQL text or a pyarrow Expression) over `schema` (the table's columns, then dt);
    `stored_names` maps each renamed column to the name objects hold it by. Raises SiltError naming the table, the
    filter and what is wrong (an unknown column with a did-you-mean, a type that does not compare)."""
    import pyarrow.compute as pc

    if isinstance(value, str):
        return _from_sql(value, table, schema, stored_names)
    if not isinstance(value, pc.Expression):
        raise SiltError(
            f"cannot filter {table} by a {type(value).__name__}: give SQL text such as "
            "\"action = 'login' AND dt >= '2026-11-20'\" or a pyarrow.compute expression"
        )
    from siltlake.read.renamed import by_position

    text = str(value)
    check(value, text, table, schema)
    return Predicate(text, value, by_position(value, schema) if stored_names else value, None)


def check(expression: Any, text: str, table: str, schema: pa.Schema) -> None:
    """Bind the expression to the table's columns (no row is read): SiltError for an unknown column or a type that
    does not compare, the same message for text and for a pyarrow expression."""
    import pyarrow as pa

    try:
        schema.empty_table().filter(expression)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        message = str(exc).splitlines()[0]
        missing = _NO_FIELD.search(message)
        if missing is not None:
            raise no_column(table, text, missing.group(1), schema.names) from None
        raise SiltError(f"cannot filter {table} by {text!r}: {message}") from None


def no_column(table: str, text: str, name: str, columns: list[str]) -> SiltError:
    return SiltError(
        f"cannot filter {table} by {text!r}: no column {name}{did_you_mean(name, columns)}; its columns "
        f"are {', '.join(columns)}"
    )


# --- SQL text ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Term:
    arrow: Any
    duckdb: str
    type: pa.DataType | None  # a column's (or a typed value's) type; None for untyped literals
    value: Any = None  # an untyped literal's Python value, taken as the type of what it is compared with
    literal: bool = False


def _from_sql(text: str, table: str, schema: pa.Schema, stored_names: Mapping[str, str]) -> Predicate:
    import sqlglot
    from sqlglot import exp

    try:
        parsed = sqlglot.parse(text, read="spark")
    except sqlglot.errors.SqlglotError as exc:
        raise SiltError(f"cannot filter {table} by {text!r}: {str(exc).splitlines()[0]}") from None
    if len(parsed) != 1 or parsed[0] is None or isinstance(parsed[0], (exp.Query, exp.Command, exp.DDL, exp.DML)):
        raise SiltError(
            f"cannot filter {table} by {text!r}: give one boolean condition, such as "
            "\"action = 'login' AND dt >= '2026-11-20'\""
        )
    tree = parsed[0]
    if not _COMPARISONS:
        _tables()
    logical = _Walk(text, table, schema, {}).term(tree)
    arrow = logical.arrow
    check(arrow, text, table, schema)
    stored = _Walk(text, table, schema, stored_names).term(tree).arrow if stored_names else arrow
    return Predicate(text, arrow, stored, logical.duckdb, (tree,))


class _Walk:
    """sqlglot's tree of a condition as pyarrow and DuckDB terms; columns resolved case-insensitively, as Spark."""

    def __init__(self, text: str, table: str, schema: pa.Schema, stored_names: Mapping[str, str]) -> None:
        self.text, self.table, self.schema, self.stored_names = text, table, schema, stored_names
        self.by_lower = {name.lower(): name for name in schema.names}

    def refuse(self, node: exp.Expr) -> SiltError:
        return SiltError(
            f"cannot filter {self.table} by {self.text!r}: {node.sql(dialect='spark')} is not "
            f"supported in a filter ({SUPPORTED}); give a pyarrow.compute expression for more"
        )

    def term(self, node: exp.Expr) -> _Term:  # one branch per node kind
        import pyarrow as pa
        import pyarrow.compute as pc
        from sqlglot import exp

        if isinstance(node, exp.Paren):
            inner = self.term(node.this)
            return _Term(inner.arrow, f"({inner.duckdb})", inner.type, inner.value, inner.literal)
        if isinstance(node, (exp.And, exp.Or)):
            left, right = self.term(node.this), self.term(node.expression)
            word = "AND" if isinstance(node, exp.And) else "OR"
            arrow = pc.and_kleene(left.arrow, right.arrow) if word == "AND" else pc.or_kleene(left.arrow, right.arrow)
            return _Term(arrow, f"({left.duckdb} {word} {right.duckdb})", pa.bool_())
        if isinstance(node, exp.Not):
            inner = self.term(node.this)
            return _Term(pc.invert(inner.arrow), f"(NOT {inner.duckdb})", pa.bool_())
        if type(node) in _COMPARISONS:
            function, operator = _COMPARISONS[type(node)]
            left, right = self.pair(self.term(node.this), self.term(node.expression))
            return _Term(
                getattr(pc, function)(left.arrow, right.arrow), f"({left.duckdb} {operator} {right.duckdb})", pa.bool_()
            )
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            inner = self.term(node.this)
            return _Term(pc.is_null(inner.arrow), f"({inner.duckdb} IS NULL)", pa.bool_())
        if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
            subject = self.term(node.this)
            values = [self.pair(subject, self.term(value))[1] for value in node.expressions]
            if subject.type is None or not all(value.literal for value in values):
                raise self.refuse(node)
            try:
                listed = pa.array([value.value for value in values], subject.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
                raise SiltError(
                    f"cannot filter {self.table} by {self.text!r}: the values of "
                    f"{node.sql(dialect='spark')} are not all of {subject.duckdb}'s type "
                    f"{subject.type}"
                ) from None
            arrow = pc.is_in(subject.arrow, listed)
            return _Term(arrow, f"({subject.duckdb} IN ({', '.join(value.duckdb for value in values)}))", pa.bool_())
        if isinstance(node, exp.Between):
            subject = self.term(node.this)
            _, low = self.pair(subject, self.term(node.args["low"]))
            _, high = self.pair(subject, self.term(node.args["high"]))
            arrow = pc.and_kleene(pc.greater_equal(subject.arrow, low.arrow), pc.less_equal(subject.arrow, high.arrow))
            return _Term(arrow, f"({subject.duckdb} BETWEEN {low.duckdb} AND {high.duckdb})", pa.bool_())
        if (
            isinstance(node, (exp.Like, exp.ILike))
            and isinstance(node.expression, exp.Literal)
            and node.expression.is_string
            and not node.args.get("escape")
        ):
            subject = self.term(node.this)
            pattern = node.expression.this
            ignore_case = isinstance(node, exp.ILike)
            return _Term(
                pc.match_like(subject.arrow, pattern, ignore_case=ignore_case),
                f"({subject.duckdb} {'ILIKE' if ignore_case else 'LIKE'} {_quote(pattern)})",
                pa.bool_(),
            )
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            left, right = self.pair(self.term(node.this), self.term(node.expression))
            function, operator = _ARITHMETIC[type(node)]
            return _Term(
                getattr(pc, function)(left.arrow, right.arrow),
                f"({left.duckdb} {operator} {right.duckdb})",
                left.type or right.type,
            )
        if isinstance(node, exp.Neg):
            inner = self.term(node.this)
            if inner.literal and isinstance(inner.value, (int, float)):
                return self.literal(-inner.value)
            return _Term(pc.negate_checked(inner.arrow), f"(- {inner.duckdb})", inner.type)
        if type(node) in _FUNCTIONS or isinstance(node, exp.Coalesce):
            return self.function(node)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Boolean):
            return self.literal(bool(node.this))
        if isinstance(node, exp.Null):
            return _Term(pc.scalar(None), "NULL", None, None, True)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return self.literal(node.this)
            number = node.this
            return self.literal(float(number) if any(c in number for c in ".eE") else int(number))
        if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.this, exp.Literal) and node.this.is_string:
            kind = node.to.this.name
            if kind == "DATE":
                return self.typed(node.this.this, pa.date32(), node)
            if kind.startswith("TIMESTAMP"):
                return self.typed(node.this.this, pa.timestamp("us", tz="UTC"), node)
        raise self.refuse(node)

    def column(self, node: exp.Column) -> _Term:
        import pyarrow.compute as pc

        if node.table:
            raise SiltError(
                f"cannot filter {self.table} by {self.text!r}: {node.sql(dialect='spark')} names a table; "
                "name the table's columns alone"
            )
        name = self.by_lower.get(node.name.lower())
        if name is None:
            raise no_column(self.table, self.text, node.name, self.schema.names)
        return _Term(pc.field(self.stored_names.get(name, name)), _ident(name), self.schema.field(name).type)

    def literal(self, value: Any) -> _Term:
        import pyarrow.compute as pc

        return _Term(pc.scalar(value), _render(value), None, value, True)

    def typed(self, value: Any, kind: pa.DataType, node: exp.Expression) -> _Term:
        """A literal as a value of `kind` (a date or time text given as one), or SiltError saying it is none."""
        import pyarrow as pa
        import pyarrow.compute as pc

        converted = _convert(value, kind)
        if converted is None:
            example = "date such as 2026-11-20" if kind == pa.date32() else "time such as 2026-11-20 10:00:00"
            raise SiltError(
                f"cannot filter {self.table} by {self.text!r}: {node.sql(dialect='spark')} is not a {example}"
            )
        return _Term(pc.scalar(pa.scalar(converted, kind)), _render(converted), kind, converted, True)

    def pair(self, left: _Term, right: _Term) -> tuple[_Term, _Term]:
        """Compared terms, an untyped literal taken as the other side's type where it converts (`dt = '2026-11-20'`,
        `user_id = '5'`): what does not convert stays as it is, and pyarrow's check names the mismatch."""
        if left.literal and left.type is None and right.type is not None:
            return self.coerced(left, right.type), right
        if right.literal and right.type is None and left.type is not None:
            return left, self.coerced(right, left.type)
        return left, right

    def coerced(self, term: _Term, kind: pa.DataType) -> _Term:
        import pyarrow as pa
        import pyarrow.compute as pc

        if term.value is None:
            return term
        converted = _convert(term.value, kind)
        if converted is None:
            return term
        return _Term(pc.scalar(pa.scalar(converted, kind)), _render(converted), kind, converted, True)

    def function(self, node: exp.Expr) -> _Term:
        import pyarrow.compute as pc
        from sqlglot import exp

        if isinstance(node, exp.Coalesce):
            terms = [self.term(node.this), *(self.term(e) for e in node.expressions)]
            kind = next((t.type for t in terms if t.type is not None), None)
            terms = [self.coerced(t, kind) if t.literal and kind is not None else t for t in terms]
            return _Term(
                pc.coalesce(*(t.arrow for t in terms)), f"COALESCE({', '.join(t.duckdb for t in terms)})", kind
            )
        function, name, result = _FUNCTIONS[type(node)]
        inner = self.term(node.this)
        return _Term(getattr(pc, function)(inner.arrow), f"{name}({inner.duckdb})", result(inner.type))


def _same(kind: pa.DataType | None) -> pa.DataType | None:
    return kind


def _int64(_: pa.DataType | None) -> pa.DataType:
    import pyarrow as pa

    return pa.int64()


_COMPARISONS: dict[type, tuple[str, str]] = {}
_ARITHMETIC: dict[type, tuple[str, str]] = {}
_FUNCTIONS: dict[type, tuple[str, str, Callable[[Any], Any]]] = {}


def _tables() -> None:
    from sqlglot import exp

    _COMPARISONS.update(
        {
            exp.EQ: ("equal", "="),
            exp.NEQ: ("not_equal", "<>"),
            exp.GT: ("greater", ">"),
            exp.GTE: ("greater_equal", ">="),
            exp.LT: ("less", "<"),
            exp.LTE: ("less_equal", "<="),
        }
    )
    _ARITHMETIC.update(
        {exp.Add: ("add_checked", "+"), exp.Sub: ("subtract_checked", "-"), exp.Mul: ("multiply_checked", "*")}
    )
    _FUNCTIONS.update(
        {
            exp.Lower: ("utf8_lower", "lower", _same),
            exp.Upper: ("utf8_upper", "upper", _same),
            exp.Length: ("utf8_length", "length", _int64),
            exp.Abs: ("abs_checked", "abs", _same),
        }
    )


def _convert(value: Any, kind: pa.DataType) -> Any | None:
    """`value` as a Python value of the Arrow type `kind`, or None where it is not one."""
    import pyarrow as pa

    from siltlake.clock import parse_time

    try:
        if pa.types.is_date(kind) and isinstance(value, str):
            return dt.date.fromisoformat(value.strip())
        if pa.types.is_timestamp(kind) and isinstance(value, (str, dt.datetime)):
            return parse_time(value).replace(tzinfo=dt.UTC)  # naive UTC, as every siltlake time
        if pa.types.is_integer(kind) and isinstance(value, str):
            return int(value.strip())
        if pa.types.is_floating(kind) and isinstance(value, (str, int)) and not isinstance(value, bool):
            return float(value)
    except ValueError:
        return None
    return value if not isinstance(value, str) or pa.types.is_string(kind) or pa.types.is_large_string(kind) else None


def _render(value: Any) -> str:
    """A value as a DuckDB literal of its type."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMPTZ {_quote(value.isoformat(sep=' '))}"
    if isinstance(value, dt.date):
        return f"DATE {_quote(value.isoformat())}"
    if isinstance(value, (int, float)):
        return repr(value)
    return _quote(str(value))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
