"""The days a row predicate (Spark SQL text) can match, by its conditions on dt: what Table.delete and Table.update
without dates rewrite, as delta-rs's and PyIceberg's deletes take a predicate alone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from siltlake.errors import SiltError
from siltlake.read.plan import date_test


def days_of_where(where: str, present: Iterable[dt.date], what: str, verb: str = "delete") -> tuple[list[dt.date], str]:
    """(the days of `present` that `where` may match, `where` without its conditions on dt): the conditions on dt
    joined to the rest by AND (dt = / <> / < / <= / > / >= / BETWEEN / IN quoted dates or DATE literals) choose
    the days and are left out of the predicate each partition's rows are tested with (they hold no dt); without
    any, every day and `where` as given. dt used any other way is refused (SiltError beginning with `what`; nothing
    was `verb`d)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    days = sorted(set(present))
    try:
        tree = sqlglot.parse_one(where, read="spark")
    except ParseError:
        return days, where  # Spark says what is wrong with it, as with dates=
    conjuncts: list[exp.Expr] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, exp.And):
            pending += [node.expression, node.this]
        elif isinstance(node, exp.Paren):
            pending.append(node.this)
        else:
            conjuncts.append(node)
    tests: list[Callable[[dt.date], bool]] = []
    rest: list[exp.Expr] = []
    for node in conjuncts:
        test = date_test(node, set())
        if test is None:
            rest.append(node)
        else:
            tests.append(test)
    if any(column.name.lower() == "dt" for node in rest for column in node.find_all(exp.Column)):
        raise SiltError(
            f"{what}: {where!r} uses dt in a way that does not say which days: compare dt with quoted "
            "dates (dt = '2026-11-20', dt >= ..., dt BETWEEN ... AND ..., dt IN (...)) joined to the rest "
            f"by AND, or give dates= and leave dt out of the predicate; nothing was {verb}d"
        )
    if not tests:
        return days, where
    remaining = " AND ".join(f"({node.sql(dialect='spark')})" for node in rest) or "true"
    return [day for day in days if all(test(day) for test in tests)], remaining
