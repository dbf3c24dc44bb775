# PyTorch layer `training-torch-base:2.13.0`: the Python base image plus torch 2.13.0 (CPU and CUDA) and numpy.
# `make images` then builds docker/training.Dockerfile FROM it as `training-torch:latest`, i.e. the training
# image with torch. That order keeps the ~5 GB torch layer out of the runtime's rebuilds: a runtime change
# rebuilds the small training layers on top, not the torch layer.
#
#   make images      (see docker/build-images.sh)
#
# The build context is a directory holding site.tar: torch==2.13.0, numpy and what they require, packed from
# the project's venv by docker/pack_site.py (the same Python 3.11 and glibc as the Debian bookworm base), so
# nothing is downloaded inside the build. With a registry and PyPI you could instead
# `RUN pip install torch==2.13.0 numpy` FROM python:3.11-slim.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# ADD extracts the local tarball: one layer of the installed files, no copy of the tarball itself.
ADD site.tar /opt/site/
# /opt/site goes on the path through a .pth file in the interpreter's own site-packages, so it also
# reaches the virtual environments `train` makes (with --system-site-packages) for requirements.txt.
RUN site=$(python3 -c 'import site; print(site.getsitepackages()[0])') \
 && mkdir -p "$site" && echo /opt/site > "$site/training-site.pth" \
 && printf '#!/bin/sh\nexec python3 -m torch.distributed.run "$@"\n' > /usr/local/bin/torchrun \
 && chmod 755 /usr/local/bin/torchrun \
 && python3 -c 'import numpy, torch; print("torch", torch.__version__, "numpy", numpy.__version__)'
