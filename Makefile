# Two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export AIRFLOW_HOME := $(CURDIR)
# Built tools (peer venvs, ...) live outside the repository, so a fresh clone (CI) reuses them.
TOOLS_CACHE ?= $(HOME)/.cache/training-jobs
export TOOLS_CACHE
TRAINING_E2E_IMAGE ?= training-base:latest
TRAINING_E2E_WORKSPACE ?= /tmp/training-e2e
GO ?= /usr/local/go/bin/go
# MinIO, the S3 server of the object-storage tests and benchmarks, built from its Go module. MinIO's
# RELEASE.<date> tags are not semantic versions, so the module proxy serves its commits as pseudo-versions:
# this one is the last commit of the repository (2026-02-12).
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_BIN := $(TOOLS_CACHE)/minio-$(MINIO_VERSION)/minio
export MINIO_BIN

# The local Kubernetes control plane (tools/k8s): pinned release, binaries cached per version.
K8S_VERSION := v1.34.4
KWOK_VERSION := v0.7.0
export K8S_BIN ?= $(TOOLS_CACHE)/k8s-$(K8S_VERSION)
# Kueue (queues, quotas, all-or-nothing admission) next to it: the controller and its CRDs from its Go module.
KUEUE_VERSION := v0.17.0
export KUEUE_DIR ?= $(TOOLS_CACHE)/kueue-$(KUEUE_VERSION)
CLUSTER_DIR ?= $(CURDIR)/.cluster

.PHONY: dist airflow-oldest install lint sandbox-deps postgres redis db demo airflow browser-deps test test-fast test-cluster test-docker engine images bench clean peers mlflow-server node-deps node-tools minio k8s-tools kueue cluster cluster-down

# Every pinned wheel (torch and its CUDA packages: several GB) is kept in a wheelhouse outside the repository, so a
# fresh clone installs offline in minutes; the index is asked only for what the wheelhouse lacks (pip's HTTP cache
# does not help: the index answers no-cache).
WHEELHOUSE := $(TOOLS_CACHE)/wheels
REQUIREMENTS := -r requirements.txt -r requirements-dev.txt setuptools==84.2.1
PIP_OFFLINE := $(PY) -m pip install -q --disable-pip-version-check --no-index --find-links $(WHEELHOUSE)
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml runtime/pyproject.toml sdk/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	mkdir -p $(WHEELHOUSE)
	$(PIP_OFFLINE) $(REQUIREMENTS) 2>/dev/null || { \
		echo "filling the wheelhouse $(WHEELHOUSE) from the index (the first time on a machine: several GB)"; \
		$(PY) -m pip wheel -q --disable-pip-version-check --find-links $(WHEELHOUSE) -w $(WHEELHOUSE) $(REQUIREMENTS) \
		&& $(PIP_OFFLINE) $(REQUIREMENTS); }
	rm -rf airflow_training_jobs.egg-info  # an older install's metadata in the checkout (setup.cfg moved it to build/) would shadow the entry points
	mkdir -p build  # setup.cfg's egg_base: an editable build writes the metadata there and needs it to exist
	$(PY) -m pip uninstall -q -y training-runtime training-sdk 2>/dev/null || true  # the runtime's and the SDK's names before 0.1.0 (taken on PyPI)
	$(PIP_OFFLINE) --no-deps -e runtime -e . -e sdk
	touch $@

install: $(VENV)/.installed sandbox-deps

# The three distributions as wheels in dist/ (names free on PyPI): airflow-training-jobs (the provider),
# airflow-training-jobs-runtime (`train`, standard library only, Python >= 3.9: what a training image installs,
# docs/docker.md) and airflow-training-jobs-sdk. setuptools comes from the project venv (no build isolation, no index);
# its in-tree build directories are removed afterwards (the checkout's build/ holds the image builds' staging).
dist: $(VENV)/.installed
	rm -rf dist && mkdir -p build
	$(PY) -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w dist . ./runtime ./sdk
	rm -rf runtime/build sdk/build build/lib build/bdist.* runtime/*.egg-info sdk/*.egg-info
	@ls dist

# The local backend runs user code in a bubblewrap sandbox ([training] local_sandbox, docs/operations.md):
# Debian's bubblewrap, installed as root when bwrap is missing; libseccomp2 for its seccomp filter; and slirp4netns for [training] local_network =
# slirp4netns (the sandbox's optional way out).
sandbox-deps:
	@command -v bwrap >/dev/null || (test "$$(id -u)" = 0 && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) || \
		echo "note: bwrap is missing and could not be installed (run as root: apt-get install bubblewrap);" \
			"the local backend refuses to run user code until it is, or [training] local_sandbox = none"
	@ldconfig -p | grep -q 'libseccomp\.so\.2' || (test "$$(id -u)" = 0 && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp2 >/dev/null) || \
		echo "note: libseccomp2 is missing (run as root: apt-get install libseccomp2); the local sandbox needs it"
	@command -v slirp4netns >/dev/null || (test "$$(id -u)" = 0 && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slirp4netns >/dev/null) || \
		echo "note: slirp4netns is missing (run as root: apt-get install slirp4netns);" \
			"[training] local_network = slirp4netns needs it"

# PostgreSQL for the production-shaped tests (tests/integration/postgres_server.py starts a private cluster per
# session): Debian's package, installed as root when no server binaries are there. Its own cluster and service are
# not wanted: createcluster.conf tells the package not to create (and start) "main" on port 5432.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
		(test "$$(id -u)" = 0 && mkdir -p /etc/postgresql-common && \
		{ test -f /etc/postgresql-common/createcluster.conf || echo "create_main_cluster = false" > \
			/etc/postgresql-common/createcluster.conf; } && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Options::=--force-confold postgresql >/dev/null) || \
		{ echo "PostgreSQL is missing and could not be installed (run as root: apt-get install postgresql)"; exit 1; }

# Redis, the CeleryExecutor's broker in the several-workers test (tests/integration/redis_server.py starts a private
# server per session): Debian's redis-server, installed as root when missing; the package starts no service here.
redis:
	@command -v redis-server >/dev/null || (test "$$(id -u)" = 0 && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) || \
		{ echo "redis-server is missing and could not be installed (run as root: apt-get install redis-server)"; exit 1; }

# Cold: 920 s here (module download + compile, 2 cores shared with other builds, load 8-14); niced, so other work
# on the machine comes first. Then cached: a fresh clone on the same machine reuses the binary.
$(MINIO_BIN):
	@test -x $(GO) || { echo "Go not found at $(GO): install Go >= 1.24 or run make GO=/path/to/go"; exit 1; }
	rm -rf $(@D).tmp.$$$$ && mkdir -p $(@D).tmp.$$$$ && \
	GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath GOBIN=$(@D).tmp.$$$$ \
		nice -n 10 $(GO) install github.com/minio/minio@$(MINIO_VERSION) && \
	mkdir -p $(@D) && mv $(@D).tmp.$$$$/minio $@ && rm -rf $(@D).tmp.$$$$

minio: $(MINIO_BIN)

db: install
	$(VENV)/bin/airflow db migrate >/dev/null

# Secrets every Airflow component shares (jwt secret, [api] secret_key, fernet key): generated once, git-ignored.
AIRFLOW_SECRETS := $(CURDIR)/airflow-secrets.env
$(AIRFLOW_SECRETS):
	python3 tools/airflow_secrets.py $@

demo: db $(AIRFLOW_SECRETS)
	set -a && . $(AIRFLOW_SECRETS) && set +a && $(PY) examples/demo.py

# The whole Airflow on http://127.0.0.1:8080 (api-server, scheduler, dag-processor, triggerer); log in as admin with
# the password in simple_auth_manager_passwords.json.generated. Ctrl-C stops everything.
airflow: db $(AIRFLOW_SECRETS)
	set -a && . $(AIRFLOW_SECRETS) && set +a && PATH=$(CURDIR)/$(VENV)/bin:$$PATH exec airflow standalone

# The real ti-containers and sagemaker-training, each in its own pinned venv under
# $(TOOLS_CACHE)/peers, for the runtime's differential tests (built once, then reused).
peers: install
	nice -n 10 $(PY) tests/runtime/peers/build.py

# The MLflow tracking server of the MLflow tests (tests/mlflow_server.py): PyPI mlflow==3.17.2, whose pins clash with
# Airflow's, in its own venv under $(TOOLS_CACHE)/mlflow-server-<hash>, every dependency pinned in
# tests/mlflow_server_requirements.txt (built once, ~2 min, then reused).
mlflow-server:
	nice -n 10 python3 tests/mlflow_server.py build

# The oldest Airflow the provider supports (pyproject.toml: apache-airflow>=3.1): Airflow 3.1.8 and everything under it,
# pinned in tests/integration/oldest_airflow_requirements.txt, in its own venv under $(TOOLS_CACHE)/airflow-oldest-<hash>
# from the wheelhouse (built once, then reused); tests/integration/test_provider_install.py runs training_job on it.
airflow-oldest: install
	nice -n 10 $(PY) tests/integration/oldest_airflow.py build

# Browser tests (tests/integration/test_ui_browser.py): Debian's chromium driven by npm's playwright-core, which never
# downloads a browser; the npm package lives in the tools cache, outside the repository.
PLAYWRIGHT_VERSION := 1.65.1
export PLAYWRIGHT_CORE_DIR := $(TOOLS_CACHE)/playwright-core-$(PLAYWRIGHT_VERSION)
browser-deps:
	@command -v chromium >/dev/null && command -v npm >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium $$(command -v npm >/dev/null || echo nodejs npm) >/dev/null)
	@test -f $(PLAYWRIGHT_CORE_DIR)/node_modules/playwright-core/package.json || (mkdir -p $(PLAYWRIGHT_CORE_DIR) && \
		PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install -q --no-save --no-audit --no-fund --prefix $(PLAYWRIGHT_CORE_DIR) \
		playwright-core@$(PLAYWRIGHT_VERSION) >/dev/null)

# pyflakes' checks (ruff, [tool.ruff] in pyproject.toml): an undefined name fails here, not in a user's run.
# A test importing conftest by name runs conftest.py a second time as another module (a second AIRFLOW_HOME).
lint: install
	$(VENV)/bin/ruff check --quiet .
	@bad=$$(grep -rlE --include='*.py' '^\s*(from conftest import|import conftest\b|from [a-z_.]*\.conftest import|import [a-z_.]*\.conftest\b)' tests/ | xargs); test -z "$$bad" || { echo "lint: $$bad import conftest by name, which runs conftest.py again as a second module (a second AIRFLOW_HOME): move what they need into a module of its own (like tests/counting_proxy.py)"; exit 1; }

# The unit and component tests (real MinIO, Docker, peer runtimes, ...) wait more than they compute: they run on
# TEST_WORKERS xdist workers, a module per worker (tests/conftest.py): 656 tests in 2 min 10 s instead of 9 min.
# The integration tests (whole Airflow deployments, clusters, real pods) mostly wait too (load ~1.2 run one at a time,
# 36 min), but on 4 workers over these 2 cores they timed out against each other: INTEGRATION_WORKERS, the real
# node's modules all on one of them.
TEST_WORKERS ?= 4
INTEGRATION_WORKERS ?= 2
# A hung run ends here, with pytest's summary, not at CI's own limit of 90 min (each test also has a limit: pyproject.toml).
INTEGRATION_LIMIT ?= 4200
test: install lint peers mlflow-server airflow-oldest images browser-deps node-tools minio k8s-tools kueue postgres redis
	$(PY) -m pytest -q -rfEs -n $(TEST_WORKERS) --ignore=tests/integration tests
	timeout -s INT $(INTEGRATION_LIMIT) $(PY) -m pytest -q -rfEs --durations=60 --junitxml=test-artifacts/integration-junit.xml -n $(INTEGRATION_WORKERS) tests/integration \
	  || { rc=$$?; test $$rc != 124 || echo "make test: the integration tests ran past $(INTEGRATION_LIMIT) s (46-50 min on 2 busy cores in 2026-12): interrupted; the tests it was running are named above"; exit $$rc; }

test-fast: install peers minio mlflow-server
	$(PY) -m pytest -q -m "not slow"

# The control plane's binaries (cold build ~40 min on 2 busy cores; a no-op once cached): see docs/kubernetes.md
# K8S_TAGS=nodes: kubelet and kube-proxy are linked into the same binary (tools/k8s/nodes.go) for the real node.
k8s-tools:
	GO=$(GO) K8S_VERSION=$(K8S_VERSION) KWOK_VERSION=$(KWOK_VERSION) K8S_TAGS=nodes tools/k8s/build.sh

# The Kueue controller and its CRDs (sigs.k8s.io/kueue at $(KUEUE_VERSION); cold build ~15 min on 2 busy cores, niced;
# a no-op once cached): tools/kueue/build.sh.
kueue:
	GO=$(GO) KUEUE_VERSION=$(KUEUE_VERSION) KUEUE_DIR=$(KUEUE_DIR) tools/kueue/build.sh

# A local Kubernetes control plane (kwok plays the node) on loopback; idempotent. Airflow's
# kubernetes_default connection then points at it, so backend "kubernetes" needs no further set-up.
# NODE=real adds a real node (containerd, kubelet, CoreDNS; tools/node/realnode.py) that takes the pods from kwok's,
# with $(TRAINING_E2E_IMAGE) imported from the local Docker engine.
NODE ?= kwok
cluster: db k8s-tools kueue $(if $(filter real,$(NODE)),node-tools images)
	$(PY) tools/k8s/localcluster.py up --dir $(CLUSTER_DIR) --bin-dir $(K8S_BIN) --kueue-dir $(KUEUE_DIR) \
		--workspace $(CURDIR)/workspace
	$(if $(filter real,$(NODE)),$(PY) tools/node/realnode.py up --dir $(CLUSTER_DIR)/node --k8s-bin $(K8S_BIN) \
		--kubeconfig $(CLUSTER_DIR)/kubeconfig --pki $(CLUSTER_DIR)/pki --image $(TRAINING_E2E_IMAGE))
	@$(VENV)/bin/airflow connections delete kubernetes_default >/dev/null 2>&1 || true
	@$(VENV)/bin/airflow connections add kubernetes_default --conn-type kubernetes \
		--conn-extra '{"kube_config_path": "$(CLUSTER_DIR)/kubeconfig"}' >/dev/null
	@echo "connection kubernetes_default -> $(CLUSTER_DIR)/kubeconfig"

cluster-down:
	$(PY) tools/node/realnode.py down --dir $(CLUSTER_DIR)/node
	$(PY) tools/k8s/localcluster.py down --dir $(CLUSTER_DIR)

# The real-cluster tests, against the cluster of `make cluster` (make test starts a private one).
# With NODE=real only the real-node tests run (kwok's tests need kwok's node); with kwok they start a private real node.
test-cluster: install cluster $(if $(filter real,$(NODE)),,node-tools)
	TRAINING_CLUSTER_DIR=$(CLUSTER_DIR) $(PY) -m pytest -v -s -rs -m cluster tests/integration/test_kubernetes_real_node*.py \
		$(if $(filter real,$(NODE)),,tests/integration/test_kubernetes_local_cluster.py tests/integration/test_kubernetes_local_cluster_dag.py \
		tests/integration/test_kubernetes_kueue.py)

test-docker: install images
	$(PY) -m pytest -v -rs -m docker

# The real node's parts (tools/node/realnode.py): Debian's containerd, runc and CNI plugins (as root, when
# missing), and CoreDNS built from its pinned module (tools/coredns; ~10 min cold, a no-op once cached).
node-deps:
	@command -v containerd >/dev/null && command -v runc >/dev/null && test -x /usr/lib/cni/bridge \
		&& command -v iptables >/dev/null && command -v ip >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			containerd runc containernetworking-plugins iptables iproute2; \
		else echo "node-deps: not root; the real-node tests will say what is missing"; fi; }

node-tools: node-deps
	TOOLS_CACHE=$(TOOLS_CACHE) tools/coredns/build.sh

# A Docker engine for the real-engine tests: as root, installs Debian's docker.io when dockerd is missing and
# starts dockerd in the background when none answers (it keeps running; see docker/ensure-engine.sh).
engine:
	docker/ensure-engine.sh

# training-base:latest, training-torch:latest, training-airflow:latest, with or without a registry
# (see docker/build-images.sh); inputs cached under $(TOOLS_CACHE)/images, unchanged images not rebuilt.
images: install engine
	TOOLS_CACHE=$(TOOLS_CACHE) PY=$(PY) docker/build-images.sh

# Benchmarks against awscli, s5cmd, tar/pigz (see bench/README.md); pigz is a Debian package, installed if we can.
bench: install minio
	@command -v pigz >/dev/null || apt-get install -y -qq pigz >/dev/null 2>&1 \
		|| (apt-get update -qq && apt-get install -y -qq pigz) >/dev/null 2>&1 \
		|| echo "note: pigz could not be installed; the pigz rows of bench/results/latest.md are skipped"
	@test -x /usr/bin/time || apt-get install -y -qq time >/dev/null 2>&1 \
		|| echo "note: GNU time could not be installed; the tools' peak memory is not measured"
	$(PY) bench/run_all.py

clean:
	rm -rf airflow.db logs workspace demo-bucket
