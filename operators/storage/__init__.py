"""Object storage for training jobs: one interface (`stores.Store`), a local store (paths, file://) and a remote
store (s3://, cos://, oss://, obs://: S3-compatible endpoints from Airflow connections), behind `hook.ObjectStorageHook`.

Modules, one concern each: location (URIs, the scheme -> default-connection table, listings' data), errors (one-line
errors), client (Airflow connections: engine settings, the boto3 client built on first use), addressing (botocore's
S3 endpoint rules without a client), retries, listing and obstore_listing, downloads, uploads, stream (pack while
uploading), small_objects, transfers (what the engines share, local copies), progress (progress lines),
disk_space (checks before staging), stores (LocalStore, RemoteStore), hook (the facade the stages use).
Kept import-free so that importing one module does not load boto3.
"""
