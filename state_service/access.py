"""Who may do what in the state service, within a tenant.

`admin` and `service` principals manage everything in their tenant. An `agent` principal
acts for one agent, the one whose id is its subject: it may read and work that agent and
the blocks attached to it, but not create, delete or re-wire agents and blocks.
"""

from __future__ import annotations

from cairn_server.auth import Principal, Role
from cairn_server.errors import PermissionDenied


def require_manager(principal: Principal, action: str) -> None:
    """Only admin and service principals may `action`."""
    if principal.role is Role.AGENT:
        raise PermissionDenied(
            f"{principal.describe()} may not {action}: it needs an admin or service key"
        )


def require_agent_access(principal: Principal, agent_id: str, action: str) -> None:
    """An agent principal may only act on its own agent."""
    if principal.role is Role.AGENT and principal.subject != agent_id:
        raise PermissionDenied(
            f"{principal.describe()} may not {action} agent '{agent_id}': an agent key acts "
            "only for the agent named by its subject"
        )


def require_block_access(
    principal: Principal, block_id: str, attached_to: list[str], action: str
) -> None:
    """An agent principal may only touch blocks attached to its own agent."""
    if principal.role is Role.AGENT and principal.subject not in attached_to:
        raise PermissionDenied(
            f"{principal.describe()} may not {action} block '{block_id}': it is not attached "
            "to the principal's agent"
        )
