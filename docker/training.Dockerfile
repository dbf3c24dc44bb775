# Training base image `training-base:latest`: the training runtime installed, `train` as the command.
#
#   make images        (builds the runtime wheel on the host, then this; see docker/build-images.sh)
#
# BASE_IMAGE: python:3.11-slim where a registry serves it; without a registry `make images` builds
# FROM training-debian:bookworm, a local image of Debian bookworm (its python3 is 3.11) made with
# debootstrap. Nothing is downloaded inside the build: the runtime comes as a wheel built on the host.
#
# Framework images build FROM this one (docker/torch.Dockerfile). The job root is mounted (or baked) at
# the layout's root: /opt/ml (ti, sagemaker), /ml (pai), /home/ma-user/modelarts (modelarts); pass
# `--root` / TRAINING_ROOT or `--layout` for the last two. Launchers should override the arguments
# (Kubernetes `args`, e.g. ["train", "--layout", "pai"]) rather than replace the image's command.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only the runtime package (standard library only, no dependencies).
COPY build/images/wheels/runtime/ /tmp/training-runtime/
RUN python3 -m pip install --no-cache-dir --no-index /tmp/training-runtime/*.whl \
 && rm -rf /tmp/training-runtime \
 && train --version

# A fixed non-root uid/gid 1000, so the Kubernetes "restricted" Pod Security profile
# (runAsNonRoot, verifiable numeric USER) admits the pod. The layout roots exist
# and belong to it; `train` needs to write output/ and, for requirements.txt, a
# virtual environment under the job root. `train` is PID 1 unless the engine adds
# an init (the Docker backend does): it handles SIGTERM / SIGINT itself and
# forwards them to the user code's process group.
RUN groupadd --gid 1000 ml \
 && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/ml --shell /bin/bash ml \
 && mkdir -p /opt/ml/code /opt/ml/input/config /opt/ml/input/data /opt/ml/model \
             /opt/ml/checkpoints /opt/ml/output/data /ml /home/ma-user/modelarts \
 && chown -R 1000:1000 /opt/ml /ml /home/ma-user

USER 1000:1000
WORKDIR /opt/ml/code
CMD ["train"]
