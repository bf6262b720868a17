"""The servers' event loop: uvloop by default, asyncio's own on request."""

from __future__ import annotations

import argparse
import asyncio
import sys

import pydantic
import pytest
import uvloop

from cairn_server import event_loop
from recall_service.server import add_flags, settings_from_args


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_uvloop_by_default_and_asyncio_on_request() -> None:
    assert event_loop.loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop.loop_factory("asyncio") is None
    assert event_loop.run(loop_module()) == "uvloop"
    assert event_loop.run(loop_module(), "asyncio") == "asyncio"


def test_the_standard_loop_serves_where_uvloop_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # its import fails
    assert event_loop.loop_factory("uvloop") is None
    assert event_loop.run(loop_module()) == "asyncio"


def test_the_loop_comes_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    assert settings_from_args(parser.parse_args([])).event_loop == "uvloop"
    monkeypatch.setenv("CAIRN_EVENT_LOOP", "asyncio")
    assert settings_from_args(parser.parse_args([])).event_loop == "asyncio"
    flagged = parser.parse_args(["--event-loop", "uvloop"])
    assert settings_from_args(flagged).event_loop == "uvloop"
    monkeypatch.setenv("CAIRN_EVENT_LOOP", "trio")
    with pytest.raises(pydantic.ValidationError, match="'uvloop' or 'asyncio'"):
        settings_from_args(parser.parse_args([]))
    with pytest.raises(SystemExit):
        parser.parse_args(["--event-loop", "trio"])
