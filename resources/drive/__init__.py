"""The drive resource (key ``drive``): Google Drive or a local folder, chosen by the environment.

``CONNECTOR_OPS_DRIVE_BACKEND=local`` (default) keeps a drive under ``<home>/drive``
(``CONNECTOR_OPS_DRIVE_DIR`` overrides); ``google`` signs in with GOOGLE_CLIENT_ID / GOOGLE_CLIENT_SECRET /
GOOGLE_REFRESH_TOKEN or a service account key named by GOOGLE_APPLICATION_CREDENTIALS (optionally
impersonating GOOGLE_IMPERSONATE_SUBJECT). Secrets are passed with ``env.value`` so Definitions get
``EnvVar``s, never the values.
"""

from __future__ import annotations

from connector_ops.environment import Env, resource_builder
from connector_ops.errors import InvalidInput
from resources.drive.base import DriveBackend, DriveItem, Grant
from resources.drive.google import DEFAULT_API_URL, GoogleDriveResource
from resources.drive.google_auth import DEFAULT_TOKEN_URL
from resources.drive.local import LocalDriveResource

__all__ = ["DriveBackend", "DriveItem", "GoogleDriveResource", "Grant", "LocalDriveResource", "drive_from_env"]

BACKENDS = ("local", "google")


@resource_builder("drive")
def drive_from_env(env: Env) -> GoogleDriveResource | LocalDriveResource:
    backend = (env.get("CONNECTOR_OPS_DRIVE_BACKEND") or "local").strip().lower()
    if backend == "local":
        return LocalDriveResource(drive_dir=env.path("CONNECTOR_OPS_DRIVE_DIR", "drive"),
                                  link_base=env.get("CONNECTOR_OPS_DRIVE_LINK_BASE"))
    if backend == "google":
        return GoogleDriveResource(
            api_url=env.get("GOOGLE_DRIVE_API_URL", DEFAULT_API_URL),
            token_url=env.get("GOOGLE_OAUTH_TOKEN_URL", DEFAULT_TOKEN_URL),
            client_id=env.value("GOOGLE_CLIENT_ID"),
            client_secret=env.value("GOOGLE_CLIENT_SECRET"),
            refresh_token=env.value("GOOGLE_REFRESH_TOKEN"),
            service_account_file=env.get("GOOGLE_APPLICATION_CREDENTIALS"),
            subject=env.get("GOOGLE_IMPERSONATE_SUBJECT"),
        )
    raise InvalidInput("CONNECTOR_OPS_DRIVE_BACKEND", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
