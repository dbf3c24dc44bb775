"""The argv that runs the user code (the working directory is the code dir).

``command`` (trainingjobconfig)
    ``bash -c <command>``: a shell on purpose (``python train.py $PAI_USER_ARGS``),
    with no implicit arguments.
entry point
    ``.py`` -> ``<job python> <script> <args>``; ``.sh`` -> ``bash <script> <args>``;
    any other executable file -> ``<script> <args>``. Never through a shell: each
    hyperparameter is ``--name`` and its value as one argv element, so a value like
    ``a b; touch x $(id)`` arrives as one argument and runs nothing. A blank value
    gives a bare ``--name``. With pytorch and processes_per_host > 1 the script
    runs under ``python -m torch.distributed.run`` (see
    :mod:`training_runtime.distributed`).

In the modelarts layout an entry point (not a command) also gets, before the
hyperparameters (so a hyperparameter of the same name wins with argparse):
``--data_url=<input/data/<first channel>/>`` (when there is a channel),
``--train_url=<model dir>/`` and, for distributed TensorFlow, ``--task_index``
``--ps_hosts`` ``--worker_hosts`` ``--job_name``.
"""

from training_runtime import hyperparameters as hps


def build(job, layout, python, plan, script):
    """``script`` is the validated absolute entry point path (ignored for commands)."""
    if job.command:
        return ["bash", "-c", job.command]
    args = platform_args(job, layout, plan) + hps.to_args(job.hyperparameters)
    if script.endswith(".py"):
        program = [script]
    elif script.endswith(".sh"):
        program = ["bash", script]
    else:
        program = [script]
    if plan.torchrun_args:
        if not script.endswith(".py"):
            program = ["--no_python"] + program
        return [python] + plan.torchrun_args + program + args
    if script.endswith(".py"):
        return [python] + program + args
    return program + args


def platform_args(job, layout, plan):
    if layout.name != "modelarts":
        return []
    args = []
    if job.channels:
        args.append("--data_url=" + layout.channel_dir(job.channels[0]).rstrip("/") + "/")
    args.append("--train_url=" + layout.model_dir.rstrip("/") + "/")
    return args + list(plan.modelarts_args)
