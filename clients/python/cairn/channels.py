"""Opening gRPC channels to a Cairn deployment: TLS unless plaintext is safe or asked for.

A channel is encrypted with TLS (the system's root certificates unless you pass your own, and
a client certificate when the server asks for one) except in two cases: the address is a
loopback one (`localhost`, `127.0.0.1`, `[::1]`, a unix socket), where `cairn up` serves
plaintext, or you pass `plaintext=True`. An API key is never sent over plaintext to another
machine unless you asked for it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import grpc
from grpc import aio

__all__ = ["TLS", "is_loopback", "open_async_channel", "open_channel", "use_plaintext"]

USER_AGENT = "cairn-python/0.1"


@dataclass(frozen=True, slots=True)
class TLS:
    """TLS settings. `root_certificates` (PEM) replaces the system roots, e.g. for a private
    CA; `certificate_chain` and `private_key` (PEM) are a client certificate for mutual TLS;
    `server_name` overrides the name checked against the server's certificate."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("a client certificate needs both certificate_chain and private_key")

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials these settings describe."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


def _host(address: str) -> str:
    target = address.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    if target.startswith("["):
        return target[1 : target.find("]")]
    if target.count(":") > 1:  # a bare IPv6 address without a port
        return target
    return target.rsplit(":", 1)[0]


def is_loopback(address: str) -> bool:
    """True for addresses that never leave this machine: loopback hosts and unix sockets."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = _host(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def use_plaintext(address: str, tls: TLS | None, plaintext: bool) -> bool:
    """Whether to open `address` without TLS (see the module docstring)."""
    if plaintext and tls is not None:
        raise ValueError("pass either tls=... or plaintext=True, not both")
    return plaintext or (tls is None and is_loopback(address))


def _options(tls: TLS | None) -> list[tuple[str, str]]:
    options = [("grpc.primary_user_agent", USER_AGENT)]
    if tls is not None and tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return options


def open_channel(address: str, *, tls: TLS | None = None, plaintext: bool = False) -> grpc.Channel:
    """A synchronous channel to `address` (`host:port`)."""
    if use_plaintext(address, tls, plaintext):
        return grpc.insecure_channel(address, options=_options(None))
    settings = tls or TLS()
    return grpc.secure_channel(address, settings.credentials(), options=_options(settings))


def open_async_channel(
    address: str, *, tls: TLS | None = None, plaintext: bool = False
) -> aio.Channel:
    """An asyncio channel to `address` (`host:port`)."""
    if use_plaintext(address, tls, plaintext):
        return aio.insecure_channel(address, options=_options(None))
    settings = tls or TLS()
    return aio.secure_channel(address, settings.credentials(), options=_options(settings))
