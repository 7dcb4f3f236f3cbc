"""docs/deploy.md's cost table is computed from what the program registers: the counts behind
it are the prod stack's resources under mocks, and the table is what infra/costs.py writes."""

from __future__ import annotations

from infra import costs
from services.cli import deployment_costs as model
from services.telemetry import metrics
from tests.infra.conftest import StackRun


def test_the_counted_resources_are_the_ones_prod_registers(prod: StackRun) -> None:
    conditions = sum(
        len(p.state["conditions"]) for p in prod.of_type("monitoring/alertPolicy:AlertPolicy")
    )
    registered = model.Counts(
        services=len(prod.of_type("cloudrunv2/service:Service")),
        conditions=conditions,
        gauges=len(prod.of_type("monitoring/metricDescriptor:MetricDescriptor")),
        log_metrics=len(prod.of_type("logging/metric:Metric")),
        scheduler_jobs=len(prod.of_type("cloudscheduler/job:Job")),
    )
    assert registered == model.PROD_COUNTS
    assert registered.gauges == len(metrics.SCAN_GAUGES)


def test_the_guides_table_is_what_the_cost_model_writes() -> None:
    text = costs.GUIDE.read_text()
    assert costs.BEGIN in text and costs.END in text
    assert costs.main(["--check"]) == 0, "run `python -m infra.costs --write`"


def test_the_figures_follow_the_counts_and_the_volume() -> None:
    one_more = model.Counts(
        **{**vars(model.PROD_COUNTS), "conditions": model.PROD_COUNTS.conditions + 1}
    )
    base = {r.item: r for r in model.rows(1_000_000, model.PROD_COUNTS)}
    more = {r.item: r for r in model.rows(1_000_000, one_more)}
    alerting = "Monitoring alerting"
    # $1.50 and its 43,200 evaluations x $0.35 per million series
    assert abs(more[alerting].low - base[alerting].low - 1.51512) < 1e-9
    small = {r.item: r for r in model.rows(1_000_000, model.PROD_COUNTS)}
    large = {r.item: r for r in model.rows(100_000_000, model.PROD_COUNTS)}
    firestore = "Firestore operations"
    assert large[firestore].low > 100 * small[firestore].low  # the free tier covers less
    assert large[firestore].high == 2 * large[firestore].low  # multi-region doubles
    # Request-based billing: an idle month of the scan fits the free tier.
    assert model.rows(0, model.PROD_COUNTS)[0].low == 0


def test_jobsctl_plan_prints_the_totals_of_the_guides_table() -> None:
    table = costs.GUIDE.read_text().split(costs.BEGIN)[1].split(costs.END)[0]
    total_row = next(line for line in table.splitlines() if line.startswith("| **total**"))
    totals = [cell.strip().strip("*") for cell in total_row.split("|")[2:4]]
    lines = model.summary()
    assert len(lines) == len(model.VOLUMES) == len(totals)
    for line, total in zip(lines, totals, strict=True):
        assert line.split(": ", 1)[1].startswith(total + " ("), (line, total)
