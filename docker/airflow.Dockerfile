# Airflow image of the training-jobs platform: the official image, the pinned requirements, the project.
#
#   docker build -f docker/airflow.Dockerfile -t training-airflow:latest .      (from the repository root)
#
# requirements.txt is a freeze for Python 3.11, hence the python3.11 variant of the official image.
# Configuration comes from the deployment (Helm chart `config:` / AIRFLOW__* variables), e.g. the
# [training] workspace (where the ReadWriteMany workspace volume is mounted) and [training.kubernetes].
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}

# Requirements first, so this layer is rebuilt only when they change. Naming the image's own
# apache-airflow version keeps pip from up- or downgrading Airflow (the official image's advice).
COPY --chown=airflow:root requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /tmp/requirements.txt

# The operators package (root pyproject.toml) and the training runtime (the local backend runs `train`
# on the worker); without dependencies: all of them are in requirements.txt, the runtime has none.
COPY --chown=airflow:root pyproject.toml /opt/airflow/src/pyproject.toml
COPY --chown=airflow:root operators/ /opt/airflow/src/operators/
COPY --chown=airflow:root runtime/pyproject.toml /opt/airflow/src/runtime/pyproject.toml
COPY --chown=airflow:root runtime/training_runtime/ /opt/airflow/src/runtime/training_runtime/
RUN pip install --no-cache-dir --no-deps /opt/airflow/src /opt/airflow/src/runtime \
 && train --version

COPY --chown=airflow:root dags/ /opt/airflow/dags/
COPY --chown=airflow:root plugins/ /opt/airflow/plugins/
