"""The library's own records on disk, under ``[devices] state_path``.

Each record is a small JSON document in its own file, replaced
atomically (write a temporary file, fsync, rename), so a crash leaves the
old or the new version, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import VgpuDriverError

LOG = logging.getLogger(__name__)


class StateStoreError(VgpuDriverError):
    msg_fmt = (
        "Cannot %(action)s %(path)s: %(reason)s. Check [devices] state_path."
    )
    code = "vgpu_driver.state.io"


class StateStore:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str, default: Any) -> Any:
        path = self._path(key)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return default
        except (OSError, ValueError) as exc:
            LOG.warning("Ignoring unreadable record %s: %s", path, exc)
            return default

    def save(self, key: str, value: Any) -> None:
        path = self._path(key)
        with self._lock:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(
                    dir=self.directory, prefix=f".{key}."
                )
                with os.fdopen(fd, "w") as handle:
                    json.dump(value, handle, indent=1, sort_keys=True)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except OSError as exc:
                raise StateStoreError(
                    action="write", path=str(path), reason=str(exc)
                ) from exc
