"""The virtual-file store (SQLAlchemy Core over SQLite or PostgreSQL): :mod:`.store` and its parts."""
