"""The virtual-file store (SQLAlchemy Core over SQLite or PostgreSQL) and its environment builder."""

from connector_ops.environment import Env, resource_builder
from resources.virtual_files.store import VirtualFileStore

__all__ = ["VirtualFileStore"]


@resource_builder("virtual_files")
def virtual_files_from_env(env: Env) -> VirtualFileStore:
    default = f"sqlite:///{env.home / 'virtual_files.db'}"
    return VirtualFileStore(database_url=env.value("CONNECTOR_OPS_DATABASE_URL", default))
