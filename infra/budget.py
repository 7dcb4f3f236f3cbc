"""A monthly budget on the stack's project, alerting at 50, 90 and 100 % of actual spend.

Created on the billing account (`billingAccount`) with the Cloud Billing Budget API
(https://cloud.google.com/billing/docs/how-to/budgets), scoped to this project only, and
sent to the stack's notification channels as well as the billing account's administrators. It
alerts; it never stops spending (a budget does not cap usage). The deployer needs
`roles/billing.costsManager` on the billing account (docs/deploy.md, step 1). No
`budgetAmount`: no budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import billing, monitoring, organizations

from infra.config import BUDGET_THRESHOLDS, StackConfig
from infra.scope import Scope


@dataclass(frozen=True)
class BudgetAlert:
    budget: billing.Budget


def create_budget(
    config: StackConfig,
    scope: Scope,
    channels: list[monitoring.NotificationChannel],
    opts: pulumi.ResourceOptions,
) -> BudgetAlert | None:
    if config.budget is None:
        return None
    number = organizations.get_project_output(project_id=config.project).number
    budget = billing.Budget(
        scope.name("budget"),
        billing_account=config.budget.billing_account,
        display_name=f"Deferred Jobs ({config.name_prefix}, {config.project})",
        # The billing account's currency; units only.
        amount=billing.BudgetAmountArgs(
            specified_amount=billing.BudgetAmountSpecifiedAmountArgs(
                units=str(config.budget.amount)
            )
        ),
        budget_filter=billing.BudgetBudgetFilterArgs(
            projects=[number.apply(lambda n: f"projects/{n}")], calendar_period="MONTH"
        ),
        threshold_rules=[
            billing.BudgetThresholdRuleArgs(threshold_percent=fraction)
            for fraction in BUDGET_THRESHOLDS
        ],
        all_updates_rule=billing.BudgetAllUpdatesRuleArgs(
            monitoring_notification_channels=[channel.id for channel in channels],
        )
        if channels
        else None,
        opts=opts,
    )
    return BudgetAlert(budget)
