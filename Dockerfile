# tlpd image: the build stage runs the project's own set-up and build scripts (the same ones CI
# runs; set-up without the test and fuzzing toolchains, only tlpd and tlpctl built), the final
# stage holds the binaries, the bundled data and runtime libraries only.
# `bash scripts/docker_check.sh` builds it, runs it and checks it end to end.
FROM debian:12 AS build
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
RUN rm -rf build \
 && TLP_TARGETS="tlpd tlpctl" bash scripts/build.sh -DTLP_BUILD_TESTS=OFF -DTLP_BUILD_BENCH=OFF

FROM debian:12-slim
# Runtime libraries of tlpd and tlpctl (OpenBLAS on OpenMP, pinned as scripts/setup.sh does).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libtorch1.13 libgrpc++1.51 librocksdb7.8 libprometheus-cpp-pull1.0 \
      libprometheus-cpp-core1.0 libspdlog1.10 libfmt9 librdkafka1 libopenblas0-openmp libgomp1 \
      libjemalloc2 \
      libabsl20220623 zlib1g ca-certificates \
 && for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do \
      update-alternatives --set "${lib}-x86_64-linux-gnu" \
        "/usr/lib/x86_64-linux-gnu/openblas-openmp/${lib}"; \
    done \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/tlpd --create-home tlpd
COPY --from=build /src/build/server/tlpd /src/build/client/tlpctl /usr/local/bin/
COPY --from=build /src/data /usr/share/tlpd/data
USER 10001
WORKDIR /var/lib/tlpd
VOLUME /var/lib/tlpd
EXPOSE 50051 9464
ENV TLPD_LISTEN=0.0.0.0:50051 TLPD_METRICS_LISTEN=0.0.0.0:9464 TLPD_DATA_DIR=/var/lib/tlpd/data \
    TLPD_CHECKPOINT=/var/lib/tlpd/model.pt
# Liveness, not readiness: the first start trains the bundled model for minutes, and a container
# marked unhealthy meanwhile would be restarted in a loop by an orchestrator that acts on it.
# Readiness is `tlpctl health` (no --service): SERVING once it takes traffic.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s \
  CMD ["tlpctl", "--address", "127.0.0.1:50051", "--timeout", "3", "health", "--service", "liveness"]
ENTRYPOINT ["tlpd"]
CMD ["serve"]
