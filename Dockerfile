# rategate: multi-stage build on Debian bookworm with the same packages as ./run.sh.
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential cmake ninja-build pkg-config ca-certificates \
        libboost1.81-all-dev nlohmann-json3-dev libspdlog-dev doctest-dev libhiredis-dev \
        libssl-dev libjwt-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY config config
COPY gateway gateway
COPY limiters limiters
COPY replay replay
COPY tests tests
COPY bench bench
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    && cmake --build build --target rategate demo_upstream

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        libboost-program-options1.81.0 libhiredis0.14 libspdlog1.10 libfmt9 libssl3 libjwt0 \
        openssl curl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/gateway/rategate /usr/local/bin/rategate
COPY --from=build /src/build/tests/demo_upstream /usr/local/bin/demo_upstream
COPY config /etc/rategate
EXPOSE 8080 8443 9901
ENTRYPOINT ["rategate"]
CMD ["--config", "/etc/rategate/docker.json"]
