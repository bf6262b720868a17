"""cairn.channels: plaintext only on loopback or when asked; TLS settings that make sense."""

from __future__ import annotations

import pytest

from cairn.channels import TLS, is_loopback, use_plaintext


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("::1", True),
        ("ipv4:127.0.0.1:50051", True),
        ("dns:///localhost:50051", True),
        ("unix:/tmp/cairn.sock", True),
        ("unix-abstract:cairn", True),
        ("10.0.0.5:50051", False),
        ("0.0.0.0:50051", False),
        ("[2001:db8::1]:50051", False),
        ("cairn.example.com:443", False),
        ("localhost.example.com:443", False),
        ("dns:///cairn.example.com:443", False),
    ],
)
def test_loopback_addresses_are_recognised(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_loopback_is_plaintext_by_default() -> None:
    assert use_plaintext("127.0.0.1:50051", None, plaintext=False) is True


def test_another_host_gets_tls_by_default() -> None:
    assert use_plaintext("cairn.example.com:443", None, plaintext=False) is False


def test_plaintext_to_another_host_only_when_asked() -> None:
    assert use_plaintext("10.0.0.5:50051", None, plaintext=True) is True


def test_tls_settings_win_on_loopback() -> None:
    assert use_plaintext("127.0.0.1:50051", TLS(), plaintext=False) is False


def test_tls_and_plaintext_together_are_refused() -> None:
    with pytest.raises(ValueError) as caught:
        use_plaintext("127.0.0.1:50051", TLS(), plaintext=True)
    assert str(caught.value) == "pass either tls=... or plaintext=True, not both"


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(ValueError) as caught:
        TLS(certificate_chain=b"-----BEGIN CERTIFICATE-----")
    assert str(caught.value) == (
        "a client certificate needs both certificate_chain and private_key"
    )
