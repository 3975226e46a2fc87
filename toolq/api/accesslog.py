"""uvicorn's access log without query strings (a ``?ticket=`` must not reach a log file)."""

from __future__ import annotations

import copy
import logging
from typing import Any


class PathOnly(logging.Filter):
    """Rewrites an access-log record's request target to its path alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep the record, with the query string of its path dropped."""
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


def log_config() -> dict[str, Any]:
    """The default uvicorn logging config, its access log filtered by ``PathOnly``."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["path_only"] = {"()": f"{__name__}.PathOnly"}
    config["handlers"]["access"]["filters"] = ["path_only"]
    config["loggers"]["uvicorn.access"]["filters"] = ["path_only"]
    return config
