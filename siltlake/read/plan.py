"""A `silt sql` query made ready for an engine, before any engine starts: parsed (sqlglot, Spark dialect), each
`schema.table` reference checked (the table exists, its time-travel clause is one the reader honours exactly,
nothing the rewrite cannot carry), the functions the sandbox refuses refused by name, and each (table, version)
read pinned in one catalog snapshot; then each reference is renamed to a one-part view name, which the engine
defines (Spark: a temp view; DuckDB: a view over the exact file lists).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from siltlake.errors import NotFoundError, SiltError
from siltlake.read.sandbox import REFUSED_FUNCTIONS, RefusedSQL, refuse_substitution

if TYPE_CHECKING:
    from sqlglot import exp

    from siltlake.catalog import PartitionView, TableRecord
    from siltlake.deployment import Deployment
    from siltlake.read.partition_prune import PartitionFilter

__all__ = ["QueryPlan", "Read", "checked_query", "parse_query", "plan_query"]

# Parts of a table reference the rewrite keeps as they are: Spark applies them to the view just as to a table.
_KEPT_TABLE_PARTS = {"this", "db", "alias", "sample", "hints", "pivots", "joins", "laterals", "version"}
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
# The views the rewrite reads tables through; a query's own name (a CTE's) may not begin so.
VIEW_PREFIX = "__silt_"


@dataclass
class Read:
    """One (table, version or time, read options) a query reads, pinned: its view name and partitions."""

    view: str
    record: TableRecord
    options: dict[str, Any]
    partitions: list[PartitionView] = field(default_factory=list)
    pruned: bool = False  # its WHERE left partitions below dt out (a rerun must plan it again to do the same)


@dataclass
class QueryPlan:
    """The query's tree with view names in place of its tables, and the reads those views stand for."""

    tree: exp.Query
    reads: dict[str, Read]


def view_name(schema_name: str, table_name: str, pin: tuple[str, object] | None = None) -> str:
    """The view of a table, one per (table, version or time) pair a query reads. Each name goes in after its
    length, so that no two tables or pins share a view: joined by a separator alone, `a.b__c` and `a__b.c`, or
    `x.y VERSION AS OF 1` and `x.y__v1`, made one name, and a query read one table twice."""
    name = f"{VIEW_PREFIX}{len(schema_name)}_{schema_name}_{len(table_name)}_{table_name}"
    if pin is None:
        return name
    kind, value = pin
    if kind == "version":
        return f"{name}__v{value}"
    assert isinstance(value, dt.datetime)
    return f"{name}__t{value:%Y%m%d%H%M%S%f}"


def time_travel(node: exp.Table, qualified: str) -> tuple[str, object] | None:
    """("version", n), ("tag", name) or ("time", naive UTC) of `t VERSION AS OF n`, `t VERSION AS OF 'name'`,
    `t TIMESTAMP AS OF '...'`; anything the reader cannot honour exactly is refused."""
    from sqlglot import exp

    from siltlake.read.version_files import parse_as_of

    clause = node.args.get("version")
    if clause is None:
        return None
    kind = str(clause.this).upper()
    text = clause.sql(dialect="spark")
    value = clause.expression
    if clause.args.get("kind") != "AS OF" or kind not in ("VERSION", "TIMESTAMP"):
        raise SiltError(f"{qualified}: {text!r} is not supported; write VERSION AS OF <n> or TIMESTAMP AS OF '<time>'")
    if kind == "VERSION":
        if isinstance(value, exp.Literal) and value.is_string:
            return "tag", value.this  # a tag's name: resolve_tag makes it its version
        if not (isinstance(value, exp.Literal) and value.this.isdigit()):
            raise SiltError(
                f"{qualified}: {text!r}: VERSION AS OF takes a table version number or a quoted tag, "
                "such as VERSION AS OF 3 or VERSION AS OF 'audit' (`silt history` lists them)"
            )
        return "version", int(value.this)
    if not (isinstance(value, exp.Literal) and value.is_string):
        raise SiltError(
            f"{qualified}: {text!r}: TIMESTAMP AS OF takes a quoted time, such as "
            "TIMESTAMP AS OF '2026-11-20 10:00:00' (UTC unless it has an offset)"
        )
    return "time", parse_as_of(value.this)


def check_alias(node: exp.Table, qualified: str) -> None:
    """Refuse what sqlglot takes for an alias but is not a name (`t@v1`, `t :v1`, `t ?`): the rewrite would
    replace it by the table's name, and the query would read the current state without a word."""
    from sqlglot import exp

    alias = node.args.get("alias")
    if alias is None:
        return
    odd = [part for part in (alias.this, *alias.columns) if part is not None and not isinstance(part, exp.Identifier)]
    if odd:
        raise SiltError(
            f"{qualified}: {odd[0].sql()!r} after the table is not an alias siltlake's rewrite can carry; "
            "to read an earlier state write VERSION AS OF <n> or TIMESTAMP AS OF '<time>'"
        )


def parse_query(query: str) -> exp.Query:
    """The query's sqlglot tree (Spark dialect): exactly one query statement."""
    import sqlglot
    from sqlglot import exp

    refuse_substitution(query)  # before sqlglot, which may fail on it with a less useful message
    try:
        statements = sqlglot.parse(query, read="spark")
    except sqlglot.errors.ParseError as exc:
        # The error's own text underlines with terminal escapes; its parts say the same plainly.
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
        near = f" (near {first['highlight']!r})" if first.get("highlight") else ""
        detail = f"{first.get('description')}{where}{near}" if first else str(exc)
        raise SiltError(f"cannot parse the query: {detail}") from None
    if len(statements) != 1 or statements[0] is None:
        raise SiltError("give exactly one SQL statement")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise SiltError("only queries (SELECT, WITH, set operations) are supported")
    return tree


def refuse_functions(tree: exp.Expr, user: str = "silt sql") -> None:
    """Refuse, by name, the built-ins REFUSED_FUNCTIONS lists, before any engine starts (Spark's own parser
    checks everything again on the Spark side; the DuckDB side runs only its allow-list)."""
    from sqlglot import exp

    for node in tree.find_all(exp.Func):
        name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
        if name in REFUSED_FUNCTIONS:
            raise RefusedSQL(f"{user} refuses {name}(): {REFUSED_FUNCTIONS[name]}")


def checked_query(query: str, user: str = "silt sql") -> exp.Query:
    """The query parsed, with the functions the sandbox refuses refused: what can be said about it without
    the catalog (`silt sql` says it before it opens the deployment, so a typo costs no catalog start-up)."""
    tree = parse_query(query)
    refuse_functions(tree, user)
    return tree


def plan_query(
    query: str | exp.Query,
    deployment: Deployment,
    *,
    reads: Mapping[str, Mapping[str, Any]] | None = None,
    user: str = "silt sql",
) -> QueryPlan:
    """Parse and check the query (or take checked_query's tree, which this changes) and pin what it reads (see
    the module's docstring). `reads` gives, per schema.table, how a reference without its own pin reads it
    (as_of_version, dates)."""
    from sqlglot import exp

    tree = checked_query(query, user) if isinstance(query, str) else query
    cte_names = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    own = sorted(name for name in cte_names if name.lower().startswith(VIEW_PREFIX))
    if own:
        raise SiltError(
            f"{own[0]}: names beginning {VIEW_PREFIX} are siltlake's own (the views a query reads its "
            "tables through); name the WITH query otherwise"
        )
    planned: dict[str, Read] = {}
    uses: dict[str, list[exp.Table]] = {}
    records: dict[str, TableRecord] = {}
    for node in list(tree.find_all(exp.Table)):
        qualified = f"{node.db}.{node.name}" if node.db else node.name
        if node.catalog:
            raise SiltError(
                f"{node.catalog}.{qualified}: siltlake tables are named schema.table, without a catalog "
                f"part; write {qualified}"
            )
        unsupported = sorted(
            key for key, value in node.args.items() if value not in (None, [], False) and key not in _KEPT_TABLE_PARTS
        )
        check_alias(node, qualified)
        if unsupported and (node.db or node.name in cte_names):
            raise SiltError(
                f"{qualified}: the query's {', '.join(unsupported)} clause on a table cannot be "
                "honoured by siltlake's rewrite; leave it out"
            )
        if not node.db:
            if node.name and node.name not in cte_names:
                raise SiltError(f"table {node.name!r} needs its schema: write schema.table")
            if node.args.get("version") is not None:
                raise SiltError(
                    f"{node.name}: VERSION/TIMESTAMP AS OF applies to siltlake tables (schema.table), "
                    "not to a query's own names"
                )
            continue
        pin = time_travel(node, qualified)
        if qualified not in records:
            try:
                records[qualified] = deployment.catalog.tables.get(qualified)
            except NotFoundError as exc:
                raise SiltError(str(exc)) from None
        if pin is not None and pin[0] == "tag":
            record = records[qualified]
            try:
                pin = "version", deployment.catalog.tags.version_of(record.id, str(pin[1]), qualified)
            except NotFoundError as exc:
                raise SiltError(f"{exc} (VERSION AS OF takes a table version number or a quoted tag's name)") from None
        view = view_name(node.db, node.name, pin)
        options: dict[str, Any] = (
            {} if pin is None else {"as_of_version": pin[1]} if pin[0] == "version" else {"as_of": pin[1]}
        )
        if pin is None and reads is not None and reads.get(qualified):
            options = dict(reads[qualified])
            # A view of its own: another query of the session may read the table unpinned meanwhile.
            view = f"{view}__r{hashlib.sha256(repr(sorted(options.items())).encode()).hexdigest()[:12]}"
        planned.setdefault(view, Read(view, records[qualified], options))
        uses.setdefault(view, []).append(node)
        alias = node.alias_or_name
        node.set("version", None)
        node.set("db", None)
        node.set("this", exp.to_identifier(view))
        if not node.alias:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    from siltlake.clock import to_naive_utc

    for view, read in planned.items():
        options = read.options
        as_of = options.get("as_of")
        # A table read once, by a SELECT whose WHERE bounds dt: only those days are planned.
        days = date_bounds(uses[view][0]) if len(uses[view]) == 1 else None
        # ... and only the partitions below dt whose values its conditions on the partition_by columns allow.
        values = value_bounds(uses[view][0], read.record) if len(uses[view]) == 1 else None
        read.pruned = values is not None
        read.partitions = deployment.catalog.version_reads.reader_snapshot(
            read.record.id,
            as_of_version=options.get("as_of_version"),
            as_of=to_naive_utc(as_of) if as_of is not None else None,
            table_name=read.record.qualified_name,
            dates=options.get("dates"),
            date_filter=days,
            partition_filter=values,
        )
        # A pinned read shows the version's columns and types, as it was (docs/design.md "What time travel shows").
        read.record = deployment.catalog.tables.definition_at(
            read.record, options.get("as_of_version"), to_naive_utc(as_of) if as_of is not None else None
        )
    return QueryPlan(tree, planned)


def _where_of(node: exp.Table) -> exp.Expr | None:
    """The condition of the WHERE of the SELECT that reads the table reference alone (no join): what every row it
    gives of the table holds; None: no such WHERE."""
    from sqlglot import exp

    select = node.parent.parent if isinstance(node.parent, exp.From) else None
    if not isinstance(select, exp.Select) or select.args.get("joins") or select.args.get("where") is None:
        return None
    condition: exp.Expr = select.args["where"].this
    return condition


def value_bounds(node: exp.Table, record: TableRecord) -> PartitionFilter | None:
    """The partitions (date, values below dt) a table reference's rows can come from, by what its SELECT's WHERE
    pins its partition_by columns to (siltlake.read.partition_prune); None: all of them."""
    from siltlake.read.partition_prune import column_types, column_values, partitions_of_values, pins_partitions

    fields = record.definition.partition_fields
    condition = _where_of(node) if fields else None
    if condition is None:
        return None
    types = column_types(record)
    allowed = column_values([condition], types, {node.alias_or_name.lower()})
    if not pins_partitions(allowed, fields):
        return None
    return lambda present: partitions_of_values(allowed, present, fields, types)


def date_bounds(node: exp.Table) -> Callable[[list[dt.date]], set[dt.date]] | None:
    """The days a table reference's rows can come from, by the conditions on dt its SELECT's WHERE joins with
    AND (dt = / <> / < / <= / > / >= / BETWEEN / IN quoted dates or DATE literals); None: all of them."""
    from sqlglot import exp

    where = _where_of(node)
    if where is None:
        return None
    names = {node.alias_or_name.lower()}
    tests: list[Callable[[dt.date], bool]] = []
    pending = [where]
    while pending:
        condition = pending.pop()
        if isinstance(condition, exp.And):
            pending += [condition.this, condition.expression]
        elif isinstance(condition, exp.Paren):
            pending.append(condition.this)
        else:
            test = date_test(condition, names)
            if test is not None:
                tests.append(test)
    if not tests:
        return None
    return lambda present: {day for day in present if all(test(day) for test in tests)}


def date_test(condition: exp.Expr, names: set[str]) -> Callable[[dt.date], bool] | None:
    from sqlglot import exp

    def is_dt(value: exp.Expression) -> bool:
        return (
            isinstance(value, exp.Column)
            and value.name.lower() == "dt"
            and isinstance(value.this, exp.Identifier)
            and (not value.table or value.table.lower() in names)
            and not value.args.get("db")
        )

    def day(value: exp.Expression) -> dt.date | None:
        if isinstance(value, exp.Cast) and value.to.is_type("date"):
            value = value.this
        if isinstance(value, exp.Literal) and value.is_string and _DATE_TEXT.fullmatch(value.this):
            try:
                return dt.date.fromisoformat(value.this)
            except ValueError:
                return None
        return None

    compare: dict[type[exp.Expr], Callable[[dt.date, dt.date], bool]] = {
        exp.EQ: lambda a, b: a == b,
        exp.NEQ: lambda a, b: a != b,
        exp.LT: lambda a, b: a < b,
        exp.LTE: lambda a, b: a <= b,
        exp.GT: lambda a, b: a > b,
        exp.GTE: lambda a, b: a >= b,
    }
    mirrored: dict[type[exp.Expr], type[exp.Expr]] = {
        exp.LT: exp.GT,
        exp.LTE: exp.GTE,
        exp.GT: exp.LT,
        exp.GTE: exp.LTE,
        exp.EQ: exp.EQ,
        exp.NEQ: exp.NEQ,
    }
    kind: type[exp.Expr] = type(condition)
    if kind in compare:
        left, right = condition.this, condition.expression
        if not is_dt(left):
            left, right, kind = right, left, mirrored[kind]
        value = day(right)
        if not is_dt(left) or value is None:
            return None
        operator = compare[kind]
        return lambda d: operator(d, value)
    if isinstance(condition, exp.Between) and is_dt(condition.this):
        low, high = day(condition.args["low"]), day(condition.args["high"])
        if low is None or high is None:
            return None
        return lambda d: low <= d <= high
    if isinstance(condition, exp.In) and is_dt(condition.this) and not condition.args.get("query"):
        values = [day(value) for value in condition.expressions]
        if not values or None in values:
            return None
        wanted = set(values)
        return lambda d: d in wanted
    return None
