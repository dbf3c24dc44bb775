"""What made a model: the lineage record of a training run, and its forms for OpenLineage and MLflow.

    record.py        the record (LineageRecord, a typed model that round-trips through JSON), its builder from the
                     validated spec and the stages' results, and where it is kept and published
    code_digest.py   the digest of a staged code directory (what `code.digest` names)
    openlineage.py   the record as OpenLineage datasets and facets (the provider's OperatorLineage)

No Airflow and no OpenLineage import at module level: the provider and the client are imported by the functions that
need them (the optional extra `lineage`), so the SDK's local mode and a DAG file's parse can import this package.
"""
