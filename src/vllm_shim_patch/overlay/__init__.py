"""The git overlay: layout on disk, lock, repository, baseline and recovery."""
