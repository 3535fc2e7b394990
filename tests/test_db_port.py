"""`toolkit db start --port N`: the embedded server also listens on 127.0.0.1:N, TCP logins need the password it
prints (the Unix socket keeps trusting the local user), and the port is kept for later starts."""

from __future__ import annotations

import shutil
import socket

import psycopg
import pytest
from click.testing import CliRunner
from support import scratch_directory

from toolkit.cli import main
from toolkit.db import server

# starts a PostgreSQL server of its own: not in `make check`
pytestmark = pytest.mark.database


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def data_dir():
    directory = scratch_directory("toolkit-test-port-")
    yield directory / "pg"
    server.stop_embedded(directory / "pg")
    shutil.rmtree(directory, ignore_errors=True)


def test_db_start_port_listens_on_loopback_with_a_password_and_keeps_it(data_dir):
    port = free_port()
    runner = CliRunner()
    started = runner.invoke(main, ["--data-dir", str(data_dir), "db", "start", "--port", str(port)])
    assert started.exit_code == 0, started.output
    tcp = next(line.split(": ", 1)[1] for line in started.output.splitlines() if "listens on TCP" in line)
    assert f"@127.0.0.1:{port}/toolkit" in tcp
    with psycopg.connect(tcp) as conn:
        assert conn.execute("SELECT inet_server_addr()::text, to_regclass('toolkit.versions') IS NOT NULL").fetchone()[
            1
        ]
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/toolkit", connect_timeout=5).close()
    socket_url = started.output.strip().splitlines()[-1]
    with psycopg.connect(socket_url) as conn:  # the Unix socket still trusts the local user
        assert conn.execute("SELECT 1").fetchone() == (1,)
    status = runner.invoke(main, ["--data-dir", str(data_dir), "db", "status", "--format", "json"])
    assert f'"tcp": "127.0.0.1:{port}"' in status.output
    assert runner.invoke(main, ["--data-dir", str(data_dir), "db", "stop"]).exit_code == 0
    # any later command starts it listening again
    assert runner.invoke(main, ["--data-dir", str(data_dir), "status"]).exit_code == 0
    with psycopg.connect(tcp) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
