"""hvdlite's Python log lines carry the rank and honour HVDLITE_LOG_LEVEL."""
import logging

import pytest

from hvdlite import logging as hvd_logging


@pytest.fixture(autouse=True)
def no_rank_from_init():
    hvd_logging.set_rank(None)
    yield
    hvd_logging.set_rank(None)


def test_rank_comes_from_the_launcher_environment():
    assert hvd_logging.current_rank({"PMI_RANK": "3"}) == "3"
    assert hvd_logging.current_rank({"OMPI_COMM_WORLD_RANK": "5"}) == "5"
    assert hvd_logging.current_rank({}) == "?"


def test_rank_set_after_init_wins_over_the_environment():
    hvd_logging.set_rank(1)
    assert hvd_logging.current_rank({"PMI_RANK": "3"}) == "1"


def test_lines_are_prefixed_with_the_rank(monkeypatch, capsys):
    monkeypatch.setenv("PMI_RANK", "2")
    monkeypatch.setenv("HVDLITE_LOG_LEVEL", "warning")
    logger = hvd_logging.get_logger()
    logger.warning("tensor %s stalled", "grad.w")
    assert "[hvdlite rank 2] WARNING: tensor grad.w stalled" in capsys.readouterr().err


def test_level_follows_hvdlite_log_level(monkeypatch, capsys):
    monkeypatch.setenv("HVDLITE_LOG_LEVEL", "error")
    logger = hvd_logging.get_logger()
    logger.warning("hidden")
    logger.error("shown")
    err = capsys.readouterr().err
    assert "hidden" not in err and "shown" in err
    monkeypatch.setenv("HVDLITE_LOG_LEVEL", "trace")
    assert hvd_logging.get_logger().isEnabledFor(hvd_logging.TRACE)


def test_horovod_log_level_alias_is_honoured(monkeypatch):
    monkeypatch.delenv("HVDLITE_LOG_LEVEL", raising=False)
    monkeypatch.setenv("HOROVOD_LOG_LEVEL", "debug")
    assert hvd_logging.get_logger().level == logging.DEBUG


def test_getting_the_logger_twice_adds_no_second_handler(monkeypatch):
    monkeypatch.delenv("HVDLITE_LOG_LEVEL", raising=False)
    def own_handlers():
        return [h for h in hvd_logging.get_logger().handlers if isinstance(h, logging.StreamHandler)
                and h.filters]
    assert len(own_handlers()) == len(own_handlers()) == 1
