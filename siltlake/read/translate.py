"""Spark SQL to DuckDB, only where both engines give the same answer (docs/design.md, "`silt sql` without Spark").

The check is an allow-list over the sqlglot tree (Spark dialect) of a query whose table references are already
one-part view names: every node must be of a kind known to behave identically on both engines, with operand
types for which it does (types are inferred from the tables' definitions). Anything else, however harmless,
raises NotFaithful and the query goes to Spark. What passes is also the DuckDB side of the sandbox: it can name
no function, file or setting outside the list.

Checked by tests/test_fast_sql.py, which runs a corpus of log queries on both engines over the same tables, and
tests/test_engine_agreement.py, generated predicates over edge values of every numeric type and strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp

__all__ = ["BEYOND_SPARK", "NotFaithful", "Translation", "translate"]

INTEGRAL = {"int", "bigint"}
# Comparable type families: both engines compare within a family the same way (strings byte-wise).
_FAMILY = {
    "int": "number",
    "bigint": "number",
    "float": "number",
    "double": "number",
    "string": "string",
    "json": "string",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
}
# Units on which Spark's and DuckDB's date_trunc agree (weeks start on Monday in both).
TRUNC_UNITS = {"year", "quarter", "month", "week", "day", "hour", "minute", "second"}
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?")
_INT_MAX = 2**31 - 1
_BIGINT_MAX = 2**63 - 1
# Spark sums an int or bigint in a bigint (ANSI mode: an overflow of any partial sum is an error) and averages one
# through a double sum (rounded past 2^53 in the order Spark adds the rows); DuckDB sums exactly. While the absolute
# values total at most these, every order of addition is exact and both give the exact answer; past them the DuckDB
# query stops with BEYOND_SPARK in its error and the query goes to Spark.
_EXACT_SUM: dict[type[exp.Expr], int] = {exp.Sum: _BIGINT_MAX, exp.Avg: 2**53}
BEYOND_SPARK = "siltlake: beyond Spark's exact range"
_DUCKDB_NUMBERS = {"int": "INTEGER", "bigint": "BIGINT", "double": "DOUBLE"}
# Timestamp parts: Spark's and DuckDB's agree on a timestamp in the session's zone (a date through its cast).
_PARTS: dict[type[exp.Expr], str] = {
    exp.Hour: "hour",
    exp.Minute: "minute",
    exp.Second: "second",
    exp.Day: "day",
    exp.DayOfMonth: "dayofmonth",
    exp.Month: "month",
    exp.Year: "year",
}
_RANKING = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
_SELECT_PARTS = {"expressions", "from_", "where", "group", "having", "order", "limit", "distinct", "with_"}


class NotFaithful(Exception):  # a verdict, not a failure: the query goes to Spark
    """The query may not give Spark's answer on DuckDB (the message says what)."""


@dataclass(frozen=True)
class Translation:
    """The DuckDB text of a query, its result's column names as Spark gives them, and their types."""

    sql: str
    columns: list[str]
    types: list[str]


@dataclass
class _Scope:
    """The one relation a SELECT reads: its names (the view or CTE name and alias) and typed columns."""

    names: set[str]
    columns: list[tuple[str, str]]  # (name, type) in order
    by_name: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, kind in self.columns:
            self.by_name.setdefault(name.lower(), kind)


def translate(tree: exp.Query, views: Mapping[str, list[tuple[str, str]]]) -> Translation:
    """The DuckDB form of `tree` (one-part view names, each in `views` with its (column, type) list), or
    NotFaithful."""
    tree = tree.copy()
    checker = _Checker({name.lower(): columns for name, columns in views.items()})
    output = checker.query(tree, {})
    names = [name for name, _ in output]
    for aggregate in list(tree.find_all(exp.Sum, exp.Avg)):  # all of an int or bigint: the checker saw to it
        guarded: exp.Expr = _exact_or_stop(aggregate)
        if id(aggregate) in checker.bare_names:  # DuckDB would name the guard by its text
            guarded = exp.alias_(guarded, checker.bare_names[id(aggregate)], quoted=True)
        aggregate.replace(guarded)
    for trunc in tree.find_all(exp.TimestampTrunc):
        trunc.set("unit", exp.var(trunc.args["unit"].name.lower()))
    for ordered in tree.find_all(exp.Ordered):  # Spark's defaults, said explicitly: ASC NULLS FIRST, DESC LAST
        ordered.set("nulls_first", bool(ordered.args.get("nulls_first", not ordered.args.get("desc"))))
    return Translation(tree.sql(dialect="duckdb"), names, [kind for _, kind in output])


def _exact_or_stop(aggregate: exp.AggFunc) -> exp.Expression:
    """Spark's sum (a bigint) or avg (the double sum over the double count) of an int or bigint, computed exactly, or
    an error naming BEYOND_SPARK where Spark's answer would depend on the order of the rows or be an error.
    `aggregate` is a Sum or an Avg; typed as their base, the type find_all of the two yields."""
    inner = aggregate.this
    value = inner.expressions[0] if isinstance(inner, exp.Distinct) else inner
    # Over every row, not only distinct ones: at least the distinct values' total, so the bound holds for both.
    magnitude = exp.Sum(this=exp.Abs(this=exp.cast(value.copy(), "HUGEINT")))
    exact: exp.Expression
    if isinstance(aggregate, exp.Sum):
        exact = exp.cast(exp.Sum(this=inner.copy()), "BIGINT")
    else:
        exact = exp.Div(
            this=exp.cast(exp.Sum(this=inner.copy()), "DOUBLE"),
            expression=exp.cast(exp.Count(this=inner.copy()), "DOUBLE"),
        )
    stop = exp.Anonymous(this="error", expressions=[exp.Literal.string(f"{BEYOND_SPARK}: {aggregate.sql('spark')}")])
    return exp.Case(
        ifs=[
            exp.If(this=exp.GT(this=magnitude, expression=exp.Literal.number(_EXACT_SUM[type(aggregate)])), true=stop)
        ],
        default=exact,
    )


def _spark_common(kinds: list[str]) -> str:
    """The type Spark compares numbers of these kinds as: a float or double with anything else as double (a float
    against an int is compared as doubles in Spark, as floats in DuckDB), int with bigint as bigint."""
    distinct = set(kinds)
    if len(distinct) == 1:
        return kinds[0]
    return "double" if distinct & {"float", "double"} else "bigint"


def _cast_to(side: exp.Expression, kind: str, to: str) -> None:
    """Cast `side` in place to Spark's comparison type `to` (the node stays itself, under a cast)."""
    if kind in (to, "null"):
        return
    cast = exp.Cast(to=exp.DataType.build(_DUCKDB_NUMBERS[to]))
    side.replace(cast)
    cast.set("this", side)


class _Checker:
    def __init__(self, views: dict[str, list[tuple[str, str]]]) -> None:
        self.views = views
        self.bare_names: dict[int, str] = {}  # unaliased select items (by id) -> Spark's name of the column

    # --- queries ------------------------------------------------------------------------------------

    def query(self, node: exp.Expr, ctes: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str]]:
        if isinstance(node, exp.Subquery):
            if any(node.args.get(key) for key in node.args if key not in ("this", "alias")):
                raise NotFaithful("a parenthesised query with clauses of its own")
            return self.query(node.this, ctes)
        if not isinstance(node, exp.Select):
            raise NotFaithful(f"{type(node).__name__.upper()} queries")
        extra = sorted(
            key for key, value in node.args.items() if value not in (None, [], False) and key not in _SELECT_PARTS
        )
        if extra:
            raise NotFaithful(f"the {', '.join(extra)} part of a SELECT")
        with_ = node.args.get("with_")
        if with_ is not None:
            if with_.args.get("recursive") or any(k for k, v in with_.args.items() if v and k != "expressions"):
                raise NotFaithful("a WITH with options")
            ctes = dict(ctes)
            for cte in with_.expressions:
                if cte.args.get("alias") is None or cte.args["alias"].columns:
                    raise NotFaithful("a CTE with column names")
                ctes[cte.alias_or_name.lower()] = self.query(cte.this, ctes)
        distinct = node.args.get("distinct")
        if distinct is not None and (distinct.args.get("on") or distinct.expressions):
            raise NotFaithful("DISTINCT ON")
        scope = self.source(node.args.get("from_"), ctes)
        if node.args.get("where") is not None:
            self.boolean(node.args["where"].this, scope, aggregates=False)
        output: list[tuple[str, str]] = []
        aliases: dict[str, str] = {}
        for item in node.expressions:
            output += self.select_item(item, scope, aliases)
        group = node.args.get("group")
        if group is not None:
            if any(group.args.get(key) for key in group.args if key != "expressions"):
                raise NotFaithful("GROUP BY ROLLUP/CUBE/GROUPING SETS/ALL")
            for item in group.expressions:
                self.ordinal_or(item, output, lambda e: self.value(e, scope, aggregates=False, aliases=aliases))
        if node.args.get("having") is not None:
            self.boolean(node.args["having"].this, scope, aggregates=True)
        if node.args.get("order") is not None:
            for ordered in node.args["order"].expressions:
                if ordered.args.get("with_fill"):
                    raise NotFaithful("WITH FILL")
                self.ordinal_or(
                    ordered.this, output, lambda e: self.value(e, scope, aggregates=True, aliases=aliases, windows=True)
                )
        limit = node.args.get("limit")
        if limit is not None:
            count = limit.expression
            if limit.args.get("offset") or not (
                isinstance(count, exp.Literal) and not count.is_string and count.this.isdigit()
            ):
                raise NotFaithful("a LIMIT that is not a plain number")
        return output

    def ordinal_or(self, item: exp.Expression, output: list, check) -> None:
        if isinstance(item, exp.Literal) and not item.is_string and item.this.isdigit():
            if not 1 <= int(item.this) <= len(output):
                raise NotFaithful("a position out of range")
            return
        check(item)

    def source(self, from_: exp.From | None, ctes: dict[str, list[tuple[str, str]]]) -> _Scope:
        if from_ is None:
            raise NotFaithful("a SELECT without FROM")
        relation = from_.this
        alias = relation.args.get("alias")
        if alias is not None and alias.columns:
            raise NotFaithful("an alias with column names")
        if isinstance(relation, exp.Table):
            if relation.args.get("db") or relation.args.get("catalog"):
                raise NotFaithful("a table that is not a siltlake table")
            if any(relation.args.get(key) for key in relation.args if key not in ("this", "alias")):
                raise NotFaithful("a table reference with clauses")
            name = relation.name.lower()
            columns = ctes.get(name) if name in ctes else self.views.get(name)
            if columns is None:
                raise NotFaithful(f"the relation {relation.name}")
            names = {name, relation.alias_or_name.lower()} if not relation.alias else {relation.alias.lower()}
            return _Scope(names, columns)
        if isinstance(relation, exp.Subquery):
            columns = self.query(relation.this, ctes)
            return _Scope({relation.alias.lower()} if relation.alias else set(), columns)
        raise NotFaithful(f"{type(relation).__name__} in FROM")

    def select_item(self, item: exp.Expression, scope: _Scope, aliases: dict[str, str]) -> list[tuple[str, str]]:
        if isinstance(item, exp.Star):
            return list(scope.columns)
        if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            self.qualifier(item, scope)
            return list(scope.columns)
        if isinstance(item, exp.Alias):
            name = item.alias
            kind = self.value(item.this, scope, aggregates=True, windows=True)
            if name.lower() in scope.by_name and not (
                isinstance(item.this, exp.Column) and item.this.name.lower() == name.lower()
            ):
                # Spark and DuckDB resolve a name that is both a column and an alias differently in places.
                raise NotFaithful(f"the alias {name} shadows a column")
            aliases[name.lower()] = kind
            return [(name, kind)]
        kind = self.value(item, scope, aggregates=True, windows=True)
        spark = spark_name(item, scope)
        if spark is None:
            raise NotFaithful(f"the column name Spark gives {item.sql(dialect='spark')} (give it an alias)")
        self.bare_names[id(item)] = spark
        return [(spark, kind)]

    def qualifier(self, column: exp.Column, scope: _Scope) -> None:
        if column.args.get("catalog") or column.args.get("db"):
            raise NotFaithful("a column qualified by more than its table")
        table = column.table
        if table and table.lower() not in scope.names:
            raise NotFaithful(f"the qualifier {table}")

    # --- expressions --------------------------------------------------------------------------------

    def boolean(self, node: exp.Expression, scope: _Scope, aggregates: bool) -> None:
        if self.value(node, scope, aggregates=aggregates) not in ("boolean", "null"):
            raise NotFaithful(f"a condition that is not boolean: {node.sql(dialect='spark')}")

    def value(
        self,
        node: exp.Expression,
        scope: _Scope,
        aggregates: bool,
        aliases: dict[str, str] | None = None,
        windows: bool = False,
    ) -> str:
        """The type of a value expression, or NotFaithful. `aliases`: select aliases it may name (GROUP BY,
        ORDER BY)."""
        if isinstance(node, exp.Paren):
            return self.value(node.this, scope, aggregates, aliases, windows)
        if isinstance(node, exp.Column):
            if not isinstance(node.this, exp.Identifier):
                raise NotFaithful(node.sql(dialect="spark"))
            self.qualifier(node, scope)
            name = node.name.lower()
            if name in scope.by_name:
                return scope.by_name[name]
            if not node.table and aliases is not None and name in aliases:
                return aliases[name]
            raise NotFaithful(f"the column {node.sql(dialect='spark')}")  # Spark says what is wrong
        if isinstance(node, exp.Literal):
            return literal_type(node)
        if isinstance(node, exp.Null):
            return "null"
        if isinstance(node, exp.Boolean):
            return "boolean"
        if isinstance(node, exp.Cast):
            return self.typed_literal(node)
        if isinstance(node, (exp.And, exp.Or)):
            for side in (node.this, node.expression):
                if self.value(side, scope, aggregates, aliases) not in ("boolean", "null"):
                    raise NotFaithful(f"{node.key.upper()} of a non-boolean")
            return "boolean"
        if isinstance(node, exp.Not):
            if self.value(node.this, scope, aggregates, aliases) not in ("boolean", "null"):
                raise NotFaithful("NOT of a non-boolean")
            return "boolean"
        if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
            self.comparable(node.this, [node.expression], scope, aggregates, aliases)
            return "boolean"
        if isinstance(node, exp.Between):
            return self.between(node, scope, aggregates, aliases)
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field") or not node.expressions:
                raise NotFaithful("IN with a subquery")
            self.comparable(node.this, node.expressions, scope, aggregates, aliases)
            return "boolean"
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise NotFaithful("IS other than IS NULL")
            self.value(node.this, scope, aggregates, aliases)
            return "boolean"
        if isinstance(node, exp.Like):
            pattern = node.expression
            if (
                node.args.get("escape")
                or not (isinstance(pattern, exp.Literal) and pattern.is_string)
                or "\\" in pattern.this
            ):
                raise NotFaithful("LIKE with an escape (Spark's default is \\, DuckDB has none)")
            if _FAMILY.get(self.value(node.this, scope, aggregates, aliases)) != "string":
                raise NotFaithful("LIKE on a value that is not a string")
            return "boolean"
        if isinstance(node, exp.Window):
            return self.window(node, scope, windows)
        return self.function(node, scope, aggregates, aliases)

    def between(self, node: exp.Between, scope: _Scope, aggregates: bool, aliases: dict[str, str] | None) -> str:
        """Spark's BETWEEN is `x >= low AND x <= high`, each pair compared as its own types; DuckDB's compares all
        three as one type, so numbers of mixed kinds get the two comparisons written out."""
        if _set_args(node) - {"this", "low", "high"}:
            raise NotFaithful(f"{node.sql(dialect='spark')}")
        sides = [node.this, node.args["low"], node.args["high"]]
        kinds = self.comparable(sides[0], sides[1:], scope, aggregates, aliases, cast=False)
        numbers = [kind for kind in kinds if kind != "null"]
        if not numbers or _FAMILY.get(numbers[0]) != "number":
            return "boolean"
        if len(set(numbers)) == 1:
            return "boolean"
        value, low, high = sides
        copy = value.copy()
        lower, upper = exp.GTE(this=value, expression=low), exp.LTE(this=copy, expression=high)
        node.replace(exp.Paren(this=exp.And(this=lower, expression=upper)))
        for (left, right), (left_kind, right_kind) in (((value, low), kinds[:2]), ((copy, high), kinds[::2])):
            to = _spark_common([kind for kind in (left_kind, right_kind) if kind != "null"] or ["null"])
            _cast_to(left, left_kind, to)
            _cast_to(right, right_kind, to)
        return "boolean"

    def comparable(
        self,
        left: exp.Expression,
        rights: list[exp.Expression],
        scope: _Scope,
        aggregates: bool,
        aliases: dict[str, str] | None,
        cast: bool = True,
    ) -> list[str]:
        """The sides' types, if Spark and DuckDB compare them alike; numbers of mixed kinds are cast to the type
        Spark compares them as (unless `cast` is off: the caller does it)."""
        sides = [left, *rights]
        kinds = [self.value(side, scope, aggregates, aliases) for side in sides]
        families = {_FAMILY.get(kind, kind) for kind in kinds if kind != "null"}
        if len(families) <= 1 and families <= {*_FAMILY.values()}:
            numbers = [kind for kind in kinds if kind != "null"]
            if cast and families == {"number"} and len(set(numbers)) > 1:
                to = _spark_common(numbers)
                for side, kind in zip(sides, kinds, strict=True):
                    _cast_to(side, kind, to)
            return kinds
        # A date or timestamp column against a quoted date or time: cast by both in the session's zone.
        if len(families) == 2 and "string" in families and families & {"date", "timestamp"}:
            pattern = _DATE_TEXT if "date" in families else _TIMESTAMP_TEXT
            texts = [side for side, kind in zip((left, *rights), kinds, strict=True) if _FAMILY.get(kind) == "string"]
            if all(isinstance(text, exp.Literal) and text.is_string and pattern.fullmatch(text.this) for text in texts):
                return kinds
        raise NotFaithful(f"a comparison of {' and '.join(sorted(families))}")

    def typed_literal(self, node: exp.Cast) -> str:
        """DATE '...' and TIMESTAMP '...' literals (sqlglot's casts of a quoted text)."""
        text, to = node.this, node.to
        if isinstance(text, exp.Literal) and text.is_string:
            if to.is_type("date") and _DATE_TEXT.fullmatch(text.this):
                return "date"
            if to.is_type("timestamp") and _TIMESTAMP_TEXT.fullmatch(text.this):
                node.set("to", exp.DataType.build("timestamptz"))  # Spark's TIMESTAMP is the session-zone one
                return "timestamp"
        raise NotFaithful(f"the cast {node.sql(dialect='spark')}")

    def function(self, node: exp.Expression, scope: _Scope, aggregates: bool, aliases: dict[str, str] | None) -> str:
        def argument(value: exp.Expression) -> str:
            if value.find(exp.AggFunc, exp.Window):
                raise NotFaithful("an aggregate inside an aggregate")
            return self.value(value, scope, False, aliases)

        if isinstance(node, exp.AggFunc):
            if not aggregates:
                raise NotFaithful("an aggregate here")
            if _set_args(node) - {"this", "big_int"} or type(node) not in (
                exp.Count,
                exp.Sum,
                exp.Avg,
                exp.Min,
                exp.Max,
            ):
                raise NotFaithful(f"the function {node.sql(dialect='spark')}")
            inner = node.this
            distinct = isinstance(inner, exp.Distinct)
            if distinct:
                if len(inner.expressions) != 1 or inner.args.get("on"):
                    raise NotFaithful("DISTINCT of several values")
                inner = inner.expressions[0]
            if isinstance(node, exp.Count):
                if not isinstance(inner, exp.Star):
                    argument(inner)
                return "bigint"
            kind = argument(inner)
            if isinstance(node, (exp.Sum, exp.Avg)):
                # Integral ones are computed exactly, within Spark's exact range (_exact_or_stop); a floating sum
                # depends on the order of the rows.
                if kind not in INTEGRAL:
                    raise NotFaithful(f"{node.key}() of a {kind}")
                return "bigint" if isinstance(node, exp.Sum) else "double"
            if kind not in _FAMILY:
                raise NotFaithful(f"{node.key}() of a {kind}")
            return kind
        if type(node) in _PARTS:
            inner = node.this
            if isinstance(inner, exp.TsOrDsToDate) and _set_args(inner) <= {"this", "safe"}:
                inner = inner.this
            if _set_args(node) - {"this"} or argument(inner) != "timestamp":
                raise NotFaithful(f"{node.sql(dialect='spark')} (on a timestamp column only)")
            return "int"
        if isinstance(node, exp.TsOrDsToDate):
            if _set_args(node) - {"safe"} != {"this"} or argument(node.this) != "timestamp":
                raise NotFaithful("to_date of anything but a timestamp")
            return "date"
        if isinstance(node, exp.TimestampTrunc):
            unit = node.args.get("unit")
            if (
                _set_args(node) != {"this", "unit"}
                or not isinstance(unit, exp.Var)
                or unit.name.lower() not in TRUNC_UNITS
            ):
                raise NotFaithful(f"{node.sql(dialect='spark')}")
            if argument(node.this) != "timestamp":
                raise NotFaithful("date_trunc of anything but a timestamp")
            return "timestamp"
        raise NotFaithful(f"{type(node).__name__}: {node.sql(dialect='spark')}")

    def window(self, node: exp.Window, scope: _Scope, allowed: bool) -> str:
        if not allowed:
            raise NotFaithful("a window function here")
        extra = _set_args(node) - {"this", "partition_by", "order", "over"}
        if type(node.this) not in _RANKING or _set_args(node.this) or extra or str(node.args.get("over")) != "OVER":
            raise NotFaithful(f"the window {node.sql(dialect='spark')}")
        for part in node.args.get("partition_by") or []:
            self.value(part, scope, aggregates=False)
        order = node.args.get("order")
        if order is None or not order.expressions:
            raise NotFaithful("a ranking window without ORDER BY")
        for ordered in order.expressions:
            self.value(ordered.this, scope, aggregates=False)
        return "int"


def _set_args(node: exp.Expression) -> set[str]:
    """The names of a node's arguments that are given (sqlglot keeps empty ones as None, [] or False)."""
    return {key for key, value in node.args.items() if value not in (None, [], False)}


def literal_type(node: exp.Literal) -> str:
    if node.is_string:
        return "string"
    text = node.this
    if text.isdigit():
        value = int(text)
        return "int" if value <= _INT_MAX else "bigint" if value <= _BIGINT_MAX else "decimal"
    return "decimal"  # 1.5 is a decimal in Spark, a decimal or double in DuckDB: compared only as such


def spark_name(node: exp.Expression, scope: _Scope) -> str | None:
    """The column name Spark gives an unaliased select item, for the forms whose name is known; else None."""
    if isinstance(node, exp.Column):
        return node.name

    def plain(value: exp.Expression) -> str | None:
        # A column as the schema spells it, unqualified: Spark's name of an inner column is the attribute's.
        if isinstance(value, exp.Column) and not value.table and any(name == value.name for name, _ in scope.columns):
            return value.name
        return None

    inner = node.this if isinstance(node, (exp.AggFunc, exp.Func)) else None
    prefix = ""
    if isinstance(inner, exp.Distinct):
        prefix, inner = "DISTINCT ", inner.expressions[0]
    if isinstance(node, exp.Count) and isinstance(inner, exp.Star):
        return "count(1)"
    if isinstance(node, exp.TimestampTrunc):
        unit, column = node.args["unit"], plain(node.this)
        return None if column is None else f"date_trunc({unit.name}, {column})"
    if isinstance(inner, exp.TsOrDsToDate) and type(node) in _PARTS:
        inner = inner.this
    names: dict[type[exp.Expr], str] = {
        exp.Count: "count",
        exp.Sum: "sum",
        exp.Avg: "avg",
        exp.Min: "min",
        exp.Max: "max",
        exp.TsOrDsToDate: "to_date",
        **_PARTS,
    }
    function = names.get(type(node))
    column = plain(inner) if inner is not None else None
    if function is None or column is None:
        return None
    return f"{function}({prefix}{column})"
