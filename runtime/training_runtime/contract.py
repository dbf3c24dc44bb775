"""What the platform and the runtime share about a training process, in one place: the environment variables every
launcher (operators/launch/) sets and `train` reads, and the files under the job root both sides use. The platform
imports these names; neither side writes the strings again."""

ROOT_ENV = "TRAINING_ROOT"  # the job root as the process sees it (the container root in a container)
CURRENT_HOST_ENV = "TRAINING_CURRENT_HOST"  # this host's name in resourceconfig.json
METRICS_STREAM = "output/metrics.jsonl"  # below the job root: points a script (and `train`) appends, one JSON a line
METRICS_FILE_ENV = "TRAINING_METRICS_FILE"  # the path of METRICS_STREAM as the script sees it
# "1": `train` also copies each point of METRICS_STREAM into its output, as a line METRIC_LINE_PREFIX + the point's JSON
# (set where the platform cannot read the job root: the kubernetes backend's cluster data plane)
METRICS_ECHO_ENV = "TRAINING_METRICS_ECHO"
METRIC_LINE_PREFIX = "[training-metric] "
JOB_VENV_ENV = "TRAINING_JOB_VENV"  # "1": requirements.txt goes into a venv of the job's own (local backend)
