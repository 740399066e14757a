"""The ``mail`` resource: one interface (:mod:`.base`), three backends (:mod:`.outbox`, :mod:`.mailjet`,
:mod:`.smtp`), chosen in ``connector_ops.environment`` from ``CONNECTOR_OPS_MAIL_BACKEND``.

Import the backend's own module: this package imports nothing, so one backend never loads another's
libraries.
"""
