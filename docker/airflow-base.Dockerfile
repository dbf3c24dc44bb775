# Local stand-in for the official apache/airflow:3.3.2-python3.11 image, for machines without a registry:
# `make images` builds it as training-airflow-base:3.3.2 FROM training-debian:bookworm (Debian bookworm,
# Python 3.11) and then docker/airflow.Dockerfile on it. It gives airflow.Dockerfile what it relies on in
# the official image: the `airflow` user (uid 50000, gid 0), AIRFLOW_HOME=/opt/airflow, AIRFLOW_VERSION,
# pip installing into the user's ~/.local, and an entrypoint that runs `airflow ARGS` unless ARGS start
# with a command. Airflow itself is installed by airflow.Dockerfile from the host-built wheelhouse.
ARG BASE_IMAGE=training-debian:bookworm
FROM ${BASE_IMAGE}

ARG AIRFLOW_VERSION=3.3.2
ENV AIRFLOW_VERSION=${AIRFLOW_VERSION} \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW_USER_HOME_DIR=/home/airflow \
    PATH=/home/airflow/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_USER=true \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

RUN useradd --uid 50000 --gid 0 --create-home --home-dir /home/airflow --shell /bin/bash airflow \
 && mkdir -p /opt/airflow/dags /opt/airflow/plugins /opt/airflow/logs \
 && chown -R 50000:0 /opt/airflow \
 && chmod -R g+rwX /opt/airflow /home/airflow \
 && printf '%s\n' '#!/bin/sh' \
      '# Like the official image: `docker run IMAGE version` runs `airflow version`; a command runs as given.' \
      'if [ $# -gt 0 ] && command -v "$1" >/dev/null 2>&1; then exec "$@"; fi' \
      'exec airflow "$@"' > /entrypoint \
 && chmod 755 /entrypoint

USER 50000
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/tini", "--", "/entrypoint"]
CMD []
