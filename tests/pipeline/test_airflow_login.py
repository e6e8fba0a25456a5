"""The login the local Airflow harness prints (``make airflow``) is the one its api-server accepts: the
passwords file is written before the components start and never rewritten in place while they do."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.airflow_local import LocalAirflow


def test_the_passwords_file_is_written_once_and_replaced_whole(tmp_path: Path) -> None:
    passwords = tmp_path / "home" / "passwords.json"
    airflow = LocalAirflow(tmp_path / "home", password="first-password")
    env = airflow.env()
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == str(passwords)
    assert json.loads(passwords.read_text()) == {"admin": "first-password"}
    inode = passwords.stat().st_ino
    airflow.env()  # each component's launch: an auth manager starting now reads the same, whole file
    airflow.env()
    assert passwords.stat().st_ino == inode
    LocalAirflow(tmp_path / "home", password="second-password").env()
    assert json.loads(passwords.read_text()) == {"admin": "second-password"}
    assert passwords.stat().st_ino != inode  # a new file renamed over the old one, never truncated
