"""Object storage for training jobs: one interface (`stores.Store`), a local store (paths, file://) and a remote
store (s3://, cos://, oss://, obs://: S3-compatible endpoints from Airflow connections), behind `hook.ObjectStorageHook`.

The engine-neutral layer, one concern a module: hook (the facade the stages use), stores (LocalStore, RemoteStore,
which picks a bucket's engine), listing (listings checked and recorded, local directories), location (URIs, the
scheme -> default-connection table, listings' data), errors (one-line errors, whatever the engine raised),
addressing (botocore's S3 endpoint rules without a client), retries (how often, how long), transfers (what the
engines share: tuning, temp names, the checks of what landed; local copies), small_objects (local writes and
deletes), progress (progress lines), disk_space (checks before staging), and the connection both engines run on:
remote (an Airflow connection's settings; its boto3 client, built on first use, for the requests obstore does not
make), remote_retries (that client's fixes), leftover_uploads (the multipart safety net).

One sub-package per engine, as launch/ has one per backend:
- botocore/: listing, downloads, uploads, stream (pack while uploading), small_objects, subscribers;
- obstore/: store (the S3Store and the switch between the engines), listing, downloads, uploads, part_queue.
Neither engine imports the other.
Kept import-free so that importing one module does not load boto3.
"""
