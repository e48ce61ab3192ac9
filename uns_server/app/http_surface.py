"""The HTTP surface's wiring: action links, provider callbacks, the operator console
and the health endpoints, over the same database and services as gRPC."""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from uns_server.channels.config import PagerDutyConfig, SlackConfig
from uns_server.domain.links import LinkSigner
from uns_server.http import console as http_console
from uns_server.http import health as http_health
from uns_server.http import integrations as http_integrations
from uns_server.http import links as http_links
from uns_server.http.console.sessions import Sessions
from uns_server.services.action_links import ActionLinkService
from uns_server.services.operations import Operations
from uns_server.services.policies import PolicyService
from uns_server.services.provider_answers import ProviderAnswers
from uns_server.services.queries import Queries

if TYPE_CHECKING:
    from uns_server.app.root import App

log = logging.getLogger("uns.server")


def link_service(app: App) -> ActionLinkService:
    keys = app.settings.link_keys
    if not keys:  # loopback only (settings refuse it elsewhere)
        keys = (secrets.token_urlsafe(32),)
        log.warning(
            "no --action-link-keys: links are signed with a random key and stop "
            "working when this process exits"
        )
    return ActionLinkService(
        app.db,
        app.acks,
        LinkSigner(keys),
        lambda: app.public_url,
        app.clock,
        lease_seconds=app.settings.lease_seconds,
    )


def routes(app: App) -> list[Any]:
    result: list[Any] = list(http_health.routes(app.ready))
    if app.links is not None:
        result += http_links.routes(app.links, lambda: app.public_url)
        channels = app.channels_config.channels
        result += http_integrations.routes(
            ProviderAnswers(app.db, app.acks, app.links, app.clock),
            {
                name: c.signing_secret
                for name, c in channels.items()
                if isinstance(c, SlackConfig) and c.signing_secret
            },
            {
                name: c.webhook_secret
                for name, c in channels.items()
                if isinstance(c, PagerDutyConfig) and c.webhook_secret
            },
        )
    result += http_console.routes(console(app))
    return result


def console(app: App) -> http_console.Console:
    """The operator console (/console/): the gRPC API's services, one more Watch
    on the same EventHub for its live views."""
    s = app.settings
    return http_console.Console(
        db=app.db,
        sessions=Sessions(
            app.db,
            app.authenticator,
            app.clock,
            idle=timedelta(minutes=s.console_session_idle_minutes),
            absolute=timedelta(hours=s.console_session_absolute_hours),
        ),
        queries=Queries(app.db),
        operations=Operations(app.db, app.clock),
        acks=app.acks,
        policies=PolicyService(app.db, app.clock),
        watch=app.watch,
        clock=app.clock,
        public_url=lambda: app.public_url,
    )
