"""The cloud drive connector (spec 4.A, v4.0.0): 11 actions over Google Drive or a local-folder drive."""
