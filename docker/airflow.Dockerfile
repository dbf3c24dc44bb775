# Airflow image `training-airflow:latest` of the training-jobs platform: Airflow, the pinned requirements,
# the project (operators, runtime, dags, plugins).
#
#   make images        (builds the wheelhouse on the host, then this; see docker/build-images.sh)
#
# AIRFLOW_IMAGE: the official apache/airflow:3.3.2-python3.11 where a registry serves it (requirements.txt
# is a freeze for Python 3.11); without a registry `make images` builds training-airflow-base:3.3.2
# (docker/airflow-base.Dockerfile, Debian bookworm) and passes it here. pip inside the build installs only
# from the wheelhouse the host built (build/images/wheels/airflow), never from the network: build
# containers do not trust this machine's CA, and the result is the same with or without a registry.
# Configuration comes from the deployment (Helm chart `config:` / AIRFLOW__* variables), e.g. the
# [training] workspace (where the ReadWriteMany workspace volume is mounted) and [training.kubernetes].
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}

# Requirements first, so this layer is rebuilt only when they change. Naming the image's own
# apache-airflow version keeps pip from up- or downgrading Airflow (the official image's advice).
COPY --chown=airflow:root requirements.txt /tmp/requirements.txt
COPY --chown=airflow:root build/images/wheels/airflow/ /tmp/wheels/
# IGNORE_REQUIRES_PYTHON=1 (set by `make images` on the Debian base only): bookworm's Python is 3.11.2 and
# one pin, soupsieve 4.1.2 (pure Python), declares Requires-Python >=3.11.5.
ARG IGNORE_REQUIRES_PYTHON=
RUN pip install --no-cache-dir --no-index --find-links /tmp/wheels ${IGNORE_REQUIRES_PYTHON:+--ignore-requires-python} \
        "apache-airflow==${AIRFLOW_VERSION}" -r /tmp/requirements.txt \
 && rm -rf /tmp/wheels

# The operators package (root pyproject.toml) and the training runtime (the local backend runs `train`
# on the worker), as wheels built on the host, without dependencies (all in requirements.txt).
COPY --chown=airflow:root build/images/wheels/project/ /tmp/project/
RUN pip install --no-cache-dir --no-index --no-deps /tmp/project/*.whl \
 && rm -rf /tmp/project \
 && train --version

# The platform's DAGs and plugin only: no example DAGs (nor their plugins) in a deployment image.
ENV AIRFLOW__CORE__LOAD_EXAMPLES=False
COPY --chown=airflow:root dags/ /opt/airflow/dags/
COPY --chown=airflow:root plugins/ /opt/airflow/plugins/
