"""Where a run's bytes live: the run folder's files and `_DONE` markers (files), the object store that
mirrors it (object_store), the DVC record of every iteration (versioning, reproduce, rerun) and the lock
that keeps two processes off one run folder (runlock)."""
