"""`jobsctl plan`'s mode costs: request-based billing (what the stack deploys) per mode, and
what instance-based billing would cost beside it."""

from __future__ import annotations

import pytest

from services.cli.mode_costs import MONTH_S, plan_modes


def test_instance_billing_costs_the_whole_month_when_runs_come_every_minute() -> None:
    modes = {m.mode: m for m in plan_modes(0, 200, 12_000, 60, 50, 5)}
    whole_month = MONTH_S * (0.000018 + 0.5 * 0.000002)
    for mode in modes.values():
        assert f"= ${whole_month:,.2f}: the instance never scales in" in mode.arithmetic[-1]
    # Idle and request-based, a run a minute costs about a dollar; polling costs more than
    # instance-based billing would (busy 50 s of 60, above the ~75 % break-even).
    assert modes["paced (end when idle)"].cost_usd_per_month == pytest.approx(1.16, abs=0.01)
    assert modes["paced (polling)"].cost_usd_per_month > whole_month


def test_a_sparse_schedule_lets_an_instance_billed_scan_scale_in() -> None:
    (one_pass, *_) = plan_modes(0, 1, 12_000, 3600, 50, 5)
    assert "up to 900 s idle after it" in one_pass.arithmetic[-1]
