# PyTorch training image `training-torch:latest`: training-base:latest plus torch (CPU and CUDA).
#
#   make images-torch      (see docker/build-images.sh)
#
# The build context is a directory holding site.tar: torch==2.13.0 and what it requires, packed from the
# project's venv by docker/pack_site.py (the same Python 3.11 / glibc as the Debian bookworm base), so
# nothing is downloaded inside the build. With a registry and PyPI you would instead
# `RUN pip install torch==2.13.0` FROM training-base.
ARG BASE_IMAGE=training-base:latest
FROM ${BASE_IMAGE}

USER root
# ADD extracts the local tarball: one layer of the installed files, no copy of the tarball itself.
ADD site.tar /opt/site/
# /opt/site goes on the path through a .pth file in the interpreter's own site-packages, so it also
# reaches the virtual environments `train` makes (with --system-site-packages) for requirements.txt.
RUN site=$(python3 -c 'import site; print(site.getsitepackages()[0])') \
 && mkdir -p "$site" && echo /opt/site > "$site/training-site.pth" \
 && printf '#!/bin/sh\nexec python3 -m torch.distributed.run "$@"\n' > /usr/local/bin/torchrun \
 && chmod 755 /usr/local/bin/torchrun \
 && python3 -c 'import torch; print("torch", torch.__version__)'
USER 1000:1000
