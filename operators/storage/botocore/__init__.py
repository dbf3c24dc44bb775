"""The botocore engine: boto3 clients of Airflow connections and s3transfer (see operators/storage/__init__.py)."""
