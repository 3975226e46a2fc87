"""``docker-compose.cells.yml`` agrees with the CLI: every command parses, every cell is served.

(No Docker here: the file is read as YAML and its commands parsed by the real ``toolq`` CLI.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer
import yaml

from toolq.cli import app
from toolq.models import RiskLevel

ROOT = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """The subcommand and its parsed parameters, as ``toolq`` would parse ``argv``."""
    assert argv[0] == "toolq"
    group: Any = typer.main.get_command(app)
    command = group.get_command(group.context_class(group), argv[1])
    assert command is not None, argv
    context = command.make_context(argv[1], argv[2:], resilient_parsing=False)
    return argv[1], dict(context.params)


def test_the_two_cell_compose_file_matches_the_cli() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.cells.yml").read_text())
    services = compose["services"]
    redis = {name for name, s in services.items() if s.get("image", "").startswith("redis")}
    served: dict[int, set[str]] = {}
    shards_seen: set[str] = set()
    for name, service in services.items():
        if name in redis:
            continue
        env = service["environment"]
        shards = json.loads(re.sub(r"\$\{TOOLQ_REDIS_PASSWORD[^}]*\}", "pw", env["TOOLQ_SHARDS"]))
        shards_seen.add(json.dumps(shards))
        hosts = [re.match(r"redis://:pw@([^:]+):6379/0$", url) for url in shards]
        assert all(hosts) and {h.group(1) for h in hosts if h} == redis, shards
        command, params = parse(service["command"])
        if command == "api":
            assert "TOOLQ_SHARD" not in env  # the API serves every cell
            continue
        assert command == "worker", name
        shard = params["shard"]
        assert 0 <= shard < len(shards) and env["TOOLQ_SHARD"] == str(shard), name
        served.setdefault(shard, set()).update(params["risk"].split(","))
        check, check_params = parse(service["healthcheck"]["test"][1:])
        assert check == "check" and check_params["shard"] == shard
        assert check_params["risk"] == params["risk"]
    assert len(shards_seen) == 1  # every process has the same list of cells, in one order
    [listed] = shards_seen
    cells = len(json.loads(listed))
    assert cells == 2
    # Every cell has a worker for every risk level.
    assert served == {i: {level.value for level in RiskLevel} for i in range(cells)}
