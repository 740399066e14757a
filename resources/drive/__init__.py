"""The drive resource (key ``drive``): Google Drive (:mod:`.google`) or a local folder (:mod:`.local`).

Both implement :class:`~connector_ops.resources.drive.base.DriveBackend`; ``connector_ops.environment``
chooses one from ``CONNECTOR_OPS_DRIVE_BACKEND``. Import the backend's own module: this package imports
nothing, so using the local drive never loads Google's sign-in libraries.
"""
