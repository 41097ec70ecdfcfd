"""A pyarrow expression as Spark SQL text, for the writes that test rows in SQL (delete, update): one predicate type
for reads and writes. pyarrow has no public walk of an expression, so its printed form is parsed; what does not
parse (functions beyond comparisons, AND/OR/NOT, IS [NOT] NULL and IN) is refused, asking for SQL text."""

from __future__ import annotations

import re
from typing import Any

from siltlake.errors import SiltError

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<timestamp>\d{4}-\d{2}-\d{2}\s\d{2}:\d{2}:\d{2}(?:\.\d+)?Z?)
      | (?P<date>\d{4}-\d{2}-\d{2})
      | (?P<number>-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)
      | (?P<op>==|!=|<=|>=|<|>)
      | (?P<punct>[(),{}\[\]=:])
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.X,
)
_COMPARISONS = {"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


class _Unsupported(Exception):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise _Unsupported(text[position : position + 20])
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_string(text: str) -> str:
    """`text` as a Spark SQL string literal (backslash escapes, Spark's default)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens, self.at = tokens, 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token[0] == "end" or (value is not None and token[1] != value):
            raise _Unsupported(token[1])
        self.at += 1
        return token

    def expression(self) -> str:
        kind, value = self.peek()
        if value == "(":
            self.take("(")
            left = self.expression()
            kind, operator = self.take()
            if operator in ("and", "or"):
                right = self.expression()
                self.take(")")
                return f"({left} {operator.upper()} {right})"
            if operator not in _COMPARISONS:
                raise _Unsupported(operator)
            right = self.expression()
            self.take(")")
            return f"({left} {_COMPARISONS[operator]} {right})"
        if kind == "word" and self.tokens[self.at + 1 : self.at + 2] == [("punct", "(")]:
            return self.call(value)
        return self.atom()

    def call(self, name: str) -> str:
        self.take(name)
        self.take("(")
        argument = self.expression()
        options = self.options() if self.peek()[1] == "," else {}
        self.take(")")
        if name == "invert":
            return f"(NOT {argument})"
        if name == "is_null":
            return f"({argument} IS NULL)"
        if name == "is_valid":
            return f"({argument} IS NOT NULL)"
        if name == "is_in" and isinstance(options.get("value_set"), list):
            return f"({argument} IN ({', '.join(options['value_set'])}))"
        raise _Unsupported(name)

    def options(self) -> dict[str, Any]:
        self.take(",")
        self.take("{")
        options: dict[str, Any] = {}
        while self.peek()[1] != "}":
            key = self.take()[1]
            self.take("=")
            if self.peek()[0] == "word" and self.tokens[self.at + 1 : self.at + 2] == [("punct", ":")]:
                self.take()
                self.take(":")
                self.take("[")
                values = []
                while self.peek()[1] != "]":
                    values.append(self.atom())
                    if self.peek()[1] == ",":
                        self.take(",")
                self.take("]")
                options[key] = values
            else:
                options[key] = self.take()[1]
            if self.peek()[1] == ",":
                self.take(",")
        self.take("}")
        return options

    def atom(self) -> str:
        kind, value = self.take()
        if kind == "string":
            return spark_string(re.sub(r"\\(.)", r"\1", value[1:-1]))
        if kind == "number":
            return value
        if kind == "date":
            return f"DATE '{value}'"
        if kind == "timestamp":  # siltlake's times are UTC (Spark's session too): a UTC instant is its wall time
            return f"TIMESTAMP '{value.removesuffix('Z')}'"
        if kind == "word" and value in ("true", "false", "null"):
            return value.upper()
        if kind == "word":
            return _ident(value)
        raise _Unsupported(value)


def expression_sql(expression: Any, where: str) -> str:
    """Spark SQL text of a pyarrow boolean expression; SiltError naming `where` when it has none."""
    text = str(expression)
    try:
        parser = _Parser(_tokens(text))
        sql = parser.expression()
        if parser.peek()[0] != "end":
            raise _Unsupported(parser.peek()[1])
    except _Unsupported as exc:
        raise SiltError(
            f"{where}: the pyarrow expression {text} has no SQL form here (at {str(exc)!r}): comparisons, &, |, ~, "
            "is_null, is_valid and isin are; give the predicate as Spark SQL text instead"
        ) from None
    return sql
