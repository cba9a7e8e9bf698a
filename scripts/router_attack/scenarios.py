"""Every scenario, in the order of the project's issue 27, item 9."""

from __future__ import annotations

from router_attack.arena import Scenario
from router_attack.floods import (
    DYNAMIC_QUERIES,
    GUID_SPRAY,
    GUID_SPRAY_UNLIMITED,
    QRP_BOMB,
    QUERY_FLOOD,
)

SCENARIOS: dict[str, Scenario] = {
    scenario.key: scenario
    for scenario in (
        QRP_BOMB,
        QUERY_FLOOD,
        GUID_SPRAY,
        GUID_SPRAY_UNLIMITED,
        DYNAMIC_QUERIES,
    )
}
