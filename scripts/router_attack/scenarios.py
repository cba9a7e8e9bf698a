"""Every scenario, in the order of the project's issue 27, item 9."""

from __future__ import annotations

from scripts.router_attack.abuse import DEFLATE_BOMB, LARGE_HITS_BYES, SLOT_HOG
from scripts.router_attack.admin import ADMIN_DUMPS, SLOW_ADMIN
from scripts.router_attack.arena import Scenario
from scripts.router_attack.floods import (
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
        SLOT_HOG,
        ADMIN_DUMPS,
        DYNAMIC_QUERIES,
        LARGE_HITS_BYES,
        SLOW_ADMIN,
        DEFLATE_BOMB,
    )
}
