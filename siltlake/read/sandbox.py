"""The one gate for user-written Spark SQL: `silt sql` queries and `silt delete --where` predicates read the
tables' data and reach nothing else on the host (docs/design.md, "What user SQL may reach").

The text Spark is about to run is parsed with Spark's own parser and the parsed tree (subqueries, CTE
definitions and lambda bodies included) is walked before Spark analyses or runs any of it, so a spelling
Spark accepts cannot slip past: names arrive unquoted, in any case, with any qualifier. Refused:

- built-in functions in REFUSED_FUNCTIONS, however qualified or quoted;
- every function that is not a Spark built-in (session, catalog and Hive functions: code we cannot see);
- IDENTIFIER(...): the name it builds is known only when Spark analyses the query;
- relations named by more than one part: `parquet.`/path`` reads files, `catalog.db.table` another catalog
  (the `sql` rewrite leaves one-part temp view and CTE names only);
- TRANSFORM ... USING (runs a program), and commands or writes of any kind;
- `${` anywhere in the text (refuse_substitution), checked before any parsing.

A Spark Connect session has no JVM in this process: there the text is checked on sqlglot's parse against the
server's own list of built-ins instead (_check_remote).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from siltlake.errors import SiltError
from siltlake.spark import is_remote, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["REFUSED_FUNCTIONS", "RefusedSQL", "check_expression", "check_query", "refuse_substitution"]

_JVM_CODE = "it calls Java methods in the Spark JVM (e.g. System.getenv), outside the table data"
_AVRO = "its options can load an Avro schema from a file or URL (avroSchemaUrl), outside the table data"
_PROTOBUF = "it reads a Protobuf descriptor file from a path on the host"
_XML = "its options can read an XSD file from a path on the host (rowValidationXSDPath)"

# Spark 4.3's built-ins that reach outside the data. The rest of the 591 built-ins were reviewed and are
# pure functions of their arguments (url_decode, parse_url, xpath: external entities are not resolved),
# or tell only harmless facts about the session (current_user, version, input_file_name).
REFUSED_FUNCTIONS: dict[str, str] = {
    "reflect": _JVM_CODE,
    "java_method": _JVM_CODE,
    "try_reflect": _JVM_CODE,
    "from_avro": _AVRO,
    "schema_of_avro": _AVRO,
    "from_protobuf": _PROTOBUF,
    "to_protobuf": _PROTOBUF,
    "from_xml": _XML,
    "schema_of_xml": _XML,
    "python_worker_logs": "it reads the Python workers' log files, not table data",
}

# Plan nodes that are not reads, besides Spark's Command trait (SET, ADD JAR, CREATE, DROP, LOAD DATA, ...).
_NOT_QUERIES = {"InsertIntoStatement", "InsertIntoDir", "UnresolvedExecuteImmediate", "ExecuteImmediateQuery"}
_BUILTIN_QUALIFIERS = ((), ("builtin",), ("system", "builtin"))


class RefusedSQL(SiltError):
    """User SQL that would reach outside the tables' data."""


def refuse_substitution(text: str, user: str = "silt sql") -> None:
    """Raise RefusedSQL if the text holds `${`, wherever it stands (a literal, a comment).

    Sessions siltlake builds or is handed have substitution off; this also covers a session switched back on
    (`siltlake.read.sql` on the caller's own session), and a literal that never says `${` cannot surprise."""
    if "${" in text:
        raise RefusedSQL(
            f"{user} refuses ${{...}}: Spark would replace it with a value of the host (an "
            "environment variable, a system property, a setting); write concat('$', '{...}') "
            "for the characters"
        )


def check_query(spark: SparkSession, query: str, user: str = "silt sql") -> None:
    """Raise RefusedSQL if the query (the exact text to run) reaches outside the data; `user` names the
    command in the message."""
    refuse_substitution(query, user)
    if is_remote(spark):
        _check_remote(spark, query, user)
        return
    gate = _Gate(spark, user)
    gate.walk(gate.parse("parsePlan", query))


def _check_remote(spark: SparkSession, query: str, user: str) -> None:
    """The gate for a Spark Connect session, whose JVM is the server's: Spark's parser cannot be walked from
    here, so the text (sqlglot's rendering of a tree plan_query checked) is parsed again by sqlglot and must be
    one query over one-part names, without TRANSFORM, calling only the server's own built-in functions
    (SHOW SYSTEM FUNCTIONS), none of them refused (docs/design.md, "A warm Spark session")."""
    import sqlglot
    from sqlglot import exp

    try:
        statements = sqlglot.parse(query, read="spark")
    except sqlglot.errors.ParseError as exc:
        raise RefusedSQL(f"{user} refuses a query it cannot check: {exc}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise RefusedSQL(f"{user} refuses it: only one query (SELECT, WITH, set operations) runs here")
    tree = statements[0]
    builtins = {row[0].lower() for row in spark.sql("SHOW SYSTEM FUNCTIONS").collect()}
    for node in tree.walk():
        if isinstance(node, exp.QueryTransform):
            raise RefusedSQL(f"{user} refuses TRANSFORM ... USING: it runs a program on the host")
        if isinstance(node, exp.Table) and (node.db or node.catalog):
            raise RefusedSQL(
                f"{user} refuses {node.sql(dialect='spark')}: it names a file path or another "
                "catalog, not a table; name tables as schema.table"
            )
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
            raise RefusedSQL(f"{user} refuses {node.sql(dialect='spark')}: it is not a Spark built-in function")
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in REFUSED_FUNCTIONS:
                raise RefusedSQL(f"{user} refuses {name}(): {REFUSED_FUNCTIONS[name]}")
            if isinstance(node, exp.Anonymous) and name not in builtins:
                raise RefusedSQL(f"{user} refuses {name}(): it is not a Spark built-in function")


def check_expression(spark: SparkSession, expression: str, user: str = "silt delete --where") -> None:
    """Raise RefusedSQL if the SQL expression (a predicate) reaches outside the data."""
    refuse_substitution(expression, user)
    gate = _Gate(spark, user)
    gate.walk(gate.parse("parseExpression", expression))


def _items(seq) -> list:  # a py4j proxy of a Scala Seq
    return [seq.apply(index) for index in range(seq.size())]


class _Gate:
    """Walks one parsed tree through py4j (a few calls per node: milliseconds for a usual query)."""

    def __init__(self, spark: SparkSession, user: str) -> None:
        view = jvm(spark)
        self.user = user
        self.parser = spark._jsparkSession.sessionState().sqlParser()
        self.plan_class = view.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.LogicalPlan")
        self.command_class = view.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
        self.subquery_class = view.java.lang.Class.forName(
            "org.apache.spark.sql.catalyst.expressions.SubqueryExpression"
        )
        self.tree_class = view.java.lang.Class.forName("org.apache.spark.sql.catalyst.trees.TreeNode")
        self.iterable_class = view.java.lang.Class.forName("scala.collection.Iterable")
        self.option_class = view.java.lang.Class.forName("scala.Option")
        analysis = view.org.apache.spark.sql.catalyst.analysis
        self.registries = {
            "function": analysis.FunctionRegistry.builtin(),
            "table function": analysis.TableFunctionRegistry.builtin(),
        }
        self.identifier = view.org.apache.spark.sql.catalyst.FunctionIdentifier
        self.known: dict[tuple[str, str], bool] = {}

    def refuse(self, what: str, why: str) -> None:
        raise RefusedSQL(f"{self.user} refuses {what}: {why}")

    def parse(self, method: str, text: str):  # a py4j proxy of the parsed tree, or None
        """None when Spark cannot parse the text: then Spark cannot run it either, and says why itself."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import AnalysisException

        try:
            return getattr(self.parser, method)(text)
        except (AnalysisException, Py4JJavaError):  # PySpark's and py4j's forms of the parser's error
            return None

    def walk(self, root) -> None:  # a py4j proxy
        pending = [root] if root is not None else []
        while pending:
            node = pending.pop()
            name = node.nodeName()
            if self.plan_class.isInstance(node):
                self.plan(node, name)
                # Every field, not expressions(): that skips maps and tuples (WINDOW w AS (...) definitions).
                pending.extend(self.nested(node))
            else:
                self.expression(node, name)
                if self.subquery_class.isInstance(node):  # IN (SELECT ...), EXISTS, scalar subqueries
                    pending.append(node.plan())
                pending.extend(_items(node.children()))
            # A plan's subquery plans (again: cheap, and nothing depends on how Spark nests them), a WITH's CTEs.
            pending.extend(_items(node.innerChildren()))

    def nested(self, node) -> list:  # a py4j proxy of a plan node
        """The tree nodes among a plan node's fields, inside sequences, maps, options and tuples too."""
        found, values = [], []
        fields = node.productIterator()
        while fields.hasNext():
            values.append(fields.next())
        while values:
            value = values.pop()
            if not hasattr(value, "getClass"):  # a string, number or boolean py4j converted
                continue
            if self.tree_class.isInstance(value):
                found.append(value)
            elif self.iterable_class.isInstance(value) or self.option_class.isInstance(value):
                items = value.iterator()
                while items.hasNext():
                    values.append(items.next())
            elif str(value.getClass().getName()).startswith("scala.Tuple"):
                items = value.productIterator()
                while items.hasNext():
                    values.append(items.next())
        return found

    def plan(self, node, name: str) -> None:
        if name == "ScriptTransformation":
            self.refuse("TRANSFORM ... USING", "it runs a program on the host")
        if name == "PlanWithUnresolvedIdentifier":
            self.refuse("IDENTIFIER(...)", "a name built when the query runs cannot be checked; write the name itself")
        if name in _NOT_QUERIES or self.command_class.isInstance(node):
            self.refuse(name, "only queries run here (SELECT, WITH, set operations): they read and change nothing")
        if name == "UnresolvedRelation":
            parts = [str(part) for part in _items(node.multipartIdentifier())]
            if len(parts) > 1:
                shown = ".".join(f"`{part}`" for part in parts)
                self.refuse(shown, "it names a file path or another catalog, not a table; name tables as schema.table")
        elif name == "UnresolvedTableValuedFunction":
            self.function([str(part) for part in _items(node.name())], "table function")

    def expression(self, node, name: str) -> None:
        if name == "UnresolvedFunction":
            self.function([str(part) for part in _items(node.nameParts())], "function")
        elif name == "UnresolvedGenerator":  # LATERAL VIEW f(...)
            identifier = node.name()
            qualifier = [str(identifier.database().get())] if identifier.database().isDefined() else []
            self.function([*qualifier, str(identifier.funcName())], "function")
        elif name == "ExpressionWithUnresolvedIdentifier":
            self.refuse("IDENTIFIER(...)", "a name built when the query runs cannot be checked; write the name itself")

    def function(self, parts: list[str], kind: str) -> None:
        *qualifier, name = parts
        key = name.lower()
        if key in REFUSED_FUNCTIONS:
            self.refuse(f"{key}()", REFUSED_FUNCTIONS[key])
        if tuple(q.lower() for q in qualifier) not in _BUILTIN_QUALIFIERS or not self.builtin(key, kind):
            self.refuse(f"{'.'.join(parts).lower()}()", f"it is not a Spark built-in {kind}")

    def builtin(self, name: str, kind: str) -> bool:
        if (kind, name) not in self.known:
            self.known[kind, name] = bool(self.registries[kind].functionExists(self.identifier.apply(name)))
        return self.known[kind, name]
