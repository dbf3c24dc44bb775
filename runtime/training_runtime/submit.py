"""``sagemaker_submit_directory``: where the code comes from when the code dir is empty.

As sagemaker-training's ``files.download_and_extract``: nothing happens when the code dir
already holds files; otherwise the submit directory is an ``s3://`` URI of a tar.gz
(fetched from ``$S3_ENDPOINT_URL``, else AWS, signed with the AWS_* credentials), a local
directory (copied), a local tarball (extracted), or any other local file (copied in).
Archive members that would land outside the code dir, links pointing outside and special
files are skipped.
"""

import logging
import os
import shutil
import tarfile
import tempfile
import time

from training_runtime import s3
from training_runtime.errors import InvalidJobError, PlatformError

log = logging.getLogger(__name__)


def fetch(uri, code_dir, environ):
    if not uri:
        return
    os.makedirs(code_dir, exist_ok=True)
    if os.listdir(code_dir):
        log.info("code directory %s is not empty: not fetching the submit directory %s", code_dir, uri)
        return
    started = time.monotonic()
    if uri.startswith("s3://"):
        with tempfile.TemporaryDirectory(prefix="submit-") as tmp:
            archive = os.path.join(tmp, "sourcedir.tar.gz")
            log.info("fetching the submit directory %s", uri)
            try:
                size = s3.download(uri, archive, environ)
            except s3.NotFound as error:
                raise InvalidJobError(
                    "sagemaker_submit_directory %s: %s: check the URI and the credentials" % (uri, error)
                ) from None
            except OSError as error:
                raise PlatformError("could not fetch sagemaker_submit_directory %s: %s" % (uri, error)) from None
            _extract(archive, code_dir, uri)
            log.info("fetched %s (%d bytes) into %s in %.1f s", uri, size, code_dir, time.monotonic() - started)
        return
    if os.path.isdir(uri):
        if os.path.realpath(uri) == os.path.realpath(code_dir):
            return
        shutil.rmtree(code_dir)
        shutil.copytree(uri, code_dir)
    elif os.path.isfile(uri) and tarfile.is_tarfile(uri):
        _extract(uri, code_dir, uri)
    elif os.path.isfile(uri):
        shutil.copy2(uri, code_dir)
    else:
        raise InvalidJobError(
            "sagemaker_submit_directory %r is neither an s3:// URI nor an existing local directory or "
            "file: fix the hyperparameter or put the code into %s" % (uri, code_dir)
        )
    log.info("copied the submit directory %s into %s", uri, code_dir)


def _extract(archive, destination, uri):
    destination = os.path.realpath(destination)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = [m for m in tar.getmembers() if _safe(m, destination)]
            if hasattr(tarfile, "data_filter"):
                tar.extractall(destination, members=members, filter="data")
            else:  # Python < 3.9.17 / 3.10.12 / 3.11.4: members are already checked
                tar.extractall(destination, members=members)
    except (tarfile.TarError, OSError, EOFError) as error:
        raise InvalidJobError(
            "sagemaker_submit_directory %s is not a readable tar.gz (%s): upload the code as a gzipped tarball"
            % (uri, error)
        ) from None


def _safe(member, destination):
    target = os.path.realpath(os.path.join(destination, member.name))
    inside = target == destination or target.startswith(destination + os.sep)
    if not inside or member.isdev():
        log.warning("skipping archive member %r: outside the code directory or a special file", member.name)
        return False
    if member.issym() or member.islnk():
        link = os.path.realpath(os.path.join(os.path.dirname(target), member.linkname))
        if not (link == destination or link.startswith(destination + os.sep)):
            log.warning("skipping archive member %r: its link points outside the code directory", member.name)
            return False
    return True
