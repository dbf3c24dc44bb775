"""The argv that runs the user code (the working directory is the code dir).

``command`` (trainingjobconfig)
    ``bash -c <command>``: a shell on purpose (``python train.py $PAI_USER_ARGS``),
    with no implicit arguments; ``$PAI_USER_ARGS`` / ``$SM_USER_ARGS`` standing as
    words of their own become the arguments themselves (see :mod:`training_runtime.commands`).
entry point
    ``.py`` -> ``<job python> <script> <args>`` (ti: ``python train.py``, sagemaker:
    ``python -- train.py``, relative to the code dir as the originals run it);
    ``.sh`` -> ``bash <script> <args>`` (sagemaker: ``/bin/sh -c "./train.sh <quoted
    args>"`` as sagemaker-training does); any other executable file -> ``<script>
    <args>``. Each hyperparameter value is one argv element, so ``a b; touch x $(id)``
    arrives as one argument and runs nothing. The arguments per layout are those of
    :func:`training_runtime.hyperparameters.args_for`. With pytorch and
    processes_per_host > 1, or elastic, the script runs under ``python -m
    torch.distributed.run`` (see :mod:`training_runtime.distributed`); elastic ``.py``
    entry points through the worker shim ``training_runtime/elastic_worker.py``.

In the modelarts layout an entry point (not a command) also gets, before the
hyperparameters (so a hyperparameter of the same name wins with argparse):
``--data_url=<input/data/<first channel>/>`` (when there is a channel),
``--train_url=<model dir>/`` and, for distributed TensorFlow, ``--task_index``
``--ps_hosts`` ``--worker_hosts`` ``--job_name``.
"""

import os
import shlex

from training_runtime import commands
from training_runtime import hyperparameters as hps


def build(job, layout, python, plan, script):
    """``script`` is the validated absolute entry point path (ignored for commands)."""
    if job.command:
        return commands.argv(job.command, job.hyperparameters)
    args = platform_args(job, layout, plan) + hps.args_for(layout.name, job.hyperparameters)
    if plan.torchrun_args:
        if plan.elastic and script.endswith(".py"):
            # lazy: only for an elastic torchrun job
            # torchrun runs `python <shim> <script> <args>`: the shim tells the script's errors from a lost peer.
            from training_runtime.distributed import ELASTIC_SHIM

            program = [ELASTIC_SHIM, script]
        else:
            program = [script] if script.endswith(".py") else ["--no_python"] + _program(script)
        return [python] + plan.torchrun_args + program + args
    # ti-containers and sagemaker-training run the script by its path relative to the
    # code dir (the cwd): sys.argv[0] is "train.py" there, and so it is here.
    relative = os.path.relpath(script, layout.code_dir)
    if script.endswith(".py"):
        if layout.name == "sagemaker":
            return [python, "--", relative] + args
        return [python, relative if layout.name == "ti" else script] + args
    if layout.name == "sagemaker":
        # sagemaker-training makes it executable and runs it through /bin/sh, arguments quoted.
        os.chmod(script, 0o777)
        return ["/bin/sh", "-c", "./%s %s" % (shlex.quote(relative), " ".join(shlex.quote(a) for a in args))]
    return _program(script) + args


def _program(script):
    return ["bash", script] if script.endswith(".sh") else [script]


def platform_args(job, layout, plan):
    if layout.name != "modelarts":
        return []
    args = []
    if job.channels:
        args.append("--data_url=" + layout.channel_dir(job.channels[0]).rstrip("/") + "/")
    args.append("--train_url=" + layout.model_dir.rstrip("/") + "/")
    return args + list(plan.modelarts_args)
