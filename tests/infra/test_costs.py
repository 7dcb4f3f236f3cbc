"""docs/deploy.md's cost table is computed from what the program registers: the counts behind
it are the prod stack's resources under mocks, and the table is what infra/costs.py writes."""

from __future__ import annotations

from infra import costs
from services.telemetry import metrics
from tests.infra.conftest import StackRun


def test_the_counted_resources_are_the_ones_prod_registers(prod: StackRun) -> None:
    conditions = sum(
        len(p.state["conditions"]) for p in prod.of_type("monitoring/alertPolicy:AlertPolicy")
    )
    registered = costs.Counts(
        services=len(prod.of_type("cloudrunv2/service:Service")),
        conditions=conditions,
        gauges=len(prod.of_type("monitoring/metricDescriptor:MetricDescriptor")),
        log_metrics=len(prod.of_type("logging/metric:Metric")),
        scheduler_jobs=len(prod.of_type("cloudscheduler/job:Job")),
    )
    assert registered == costs.PROD_COUNTS
    assert registered.gauges == len(metrics.SCAN_GAUGES)


def test_the_guides_table_is_what_the_cost_model_writes() -> None:
    text = costs.GUIDE.read_text()
    assert costs.BEGIN in text and costs.END in text
    assert costs.main(["--check"]) == 0, "run `python -m infra.costs --write`"


def test_the_figures_follow_the_counts_and_the_volume() -> None:
    one_more = costs.Counts(**{**vars(costs.PROD_COUNTS), "conditions": 11})
    base = {r.item: r for r in costs.rows(1_000_000, costs.PROD_COUNTS)}
    more = {r.item: r for r in costs.rows(1_000_000, one_more)}
    alerting = "Monitoring alerting"
    # $1.50 and its 43,200 evaluations x $0.35 per million series
    assert abs(more[alerting].low - base[alerting].low - 1.51512) < 1e-9
    small = {r.item: r for r in costs.rows(1_000_000, costs.PROD_COUNTS)}
    large = {r.item: r for r in costs.rows(100_000_000, costs.PROD_COUNTS)}
    firestore = "Firestore operations"
    assert large[firestore].low > 100 * small[firestore].low  # the free tier covers less
    assert large[firestore].high == 2 * large[firestore].low  # multi-region doubles
    # Request-based billing: an idle month of the scan fits the free tier.
    assert costs.rows(0, costs.PROD_COUNTS)[0].low == 0
